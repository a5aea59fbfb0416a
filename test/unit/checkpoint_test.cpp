#include "kubelet/checkpoint.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "support/temp_dir.h"

namespace gdw {
namespace {

::testing::AssertionResult contains(const std::string& text, const std::string& part) {
  if (text.find(part) != std::string::npos) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure() << "\"" << text << "\" does not contain \"" << part << "\"";
}

std::string fixture(const std::string& name) {
  return test::read_file(std::string(GDW_TEST_FIXTURES) + "/checkpoint/" + name);
}

Checkpoint parse_ok(const std::string& text) {
  auto cp = parse_checkpoint(text);
  EXPECT_TRUE(cp.ok()) << (cp.ok() ? "" : cp.error().message);
  return cp.ok() ? *cp : Checkpoint{};
}

// A checkpoint whose stored checksum is FNV-1a of `spew`: valid exactly when the parser
// rebuilds that text from `data`.
std::string with_checksum_of(const std::string& data, const std::string& spew) {
  return R"({"Data":)" + data + R"(,"Checksum":)" + std::to_string(fnv1a32(spew)) + "}";
}

constexpr const char* kGpuA = "GPU-11111111-2222-4333-8444-555555555555";
constexpr const char* kGpuB = "GPU-66666666-7777-4888-9999-aaaaaaaaaaaa";
constexpr const char* kGpuC = "GPU-bbbbbbbb-cccc-4ddd-aeee-ffffffffffff";
constexpr const char* kGpuD = "GPU-0650a168-e770-3ea8-8ac3-8a1d419763e0";
constexpr const char* kMig = "MIG-9d2b5c1e-3f4a-5b6c-8d7e-0f1a2b3c4d5e";

TEST(Fnv1a32, MatchesPublishedVectors) {
  EXPECT_EQ(fnv1a32(""), 0x811c9dc5u);
  EXPECT_EQ(fnv1a32("a"), 0xe40c292cu);
  EXPECT_EQ(fnv1a32("foobar"), 0xbf9cf968u);
}

TEST(CheckpointChecksum, ReproducesTheReferenceTestVector) {
  const std::string text =
      R"({"Data":{"PodDeviceEntries":null,"RegisteredDevices":{"nvidia.com/gpu":["GPU-0650a168-e770-3ea8-8ac3-8a1d419763e0"]}},"Checksum":3952659280})";
  Checkpoint cp = parse_ok(text);
  EXPECT_EQ(cp.stored_checksum, 3952659280u);
  EXPECT_EQ(cp.computed_checksum, 3952659280u);
  EXPECT_TRUE(cp.checksum_valid);
  EXPECT_FALSE(cp.checksum_unverifiable.has_value());
  EXPECT_TRUE(cp.entries.empty());
  EXPECT_EQ(cp.registered_devices.at("nvidia.com/gpu"), std::vector<std::string>{kGpuD});
}

TEST(CheckpointChecksum, DetectsAnEditedFile) {
  // one-pod.json with its DeviceIDs changed and its checksum left alone.
  Checkpoint cp = parse_ok(fixture("invalid-checksum.json"));
  EXPECT_EQ(cp.stored_checksum, 3117741812u);
  EXPECT_NE(cp.computed_checksum, cp.stored_checksum);
  EXPECT_NE(cp.computed_checksum, 0u);
  EXPECT_FALSE(cp.checksum_valid);
  EXPECT_FALSE(cp.checksum_unverifiable.has_value());
  ASSERT_EQ(cp.entries.size(), 1u);  // still parsed: what to do with it is the caller's call
  EXPECT_EQ(cp.entries[0].device_ids, std::vector<std::string>{kGpuB});
}

// The dump kubelet hashes, value by value: each case's stored checksum is FNV-1a of the
// expected text, so the parse is valid only if the parser rebuilt exactly that text.
struct SpewCase {
  const char* name;
  std::string data;
  std::string spew;
};

void PrintTo(const SpewCase& c, std::ostream* os) { *os << c.name; }

class CheckpointSpew : public ::testing::TestWithParam<SpewCase> {};

TEST_P(CheckpointSpew, ChecksumCoversExactlyThisText) {
  const SpewCase& c = GetParam();
  SCOPED_TRACE(c.spew);
  Checkpoint cp = parse_ok(with_checksum_of(c.data, c.spew));
  EXPECT_FALSE(cp.checksum_unverifiable.has_value()) << cp.checksum_unverifiable.value_or("");
  EXPECT_TRUE(cp.checksum_valid);
}

const std::string kHead = "(checkpoint.checkpointData){PodDeviceEntries:([]checkpoint.PodDevicesEntry)";
const std::string kReg = " RegisteredDevices:(map[string][]string)";
std::string entry_spew(const std::string& ids, const std::string& alloc) {
  return "{PodUID:(string)p ContainerName:(string)c ResourceName:(string)r DeviceIDs:" + ids +
         " AllocResp:([]uint8)" + alloc + "}";
}
std::string entry_json(const std::string& ids, const std::string& alloc_field) {
  return R"({"PodUID":"p","ContainerName":"c","ResourceName":"r","DeviceIDs":)" + ids + alloc_field + "}";
}

INSTANTIATE_TEST_SUITE_P(
    GoSemantics, CheckpointSpew,
    ::testing::Values(
        // kubelet decodes into an empty list and map: absent fields stay empty, null is nil.
        SpewCase{"AbsentFieldsAreEmpty", "{}", kHead + "[]" + kReg + "map[]}"},
        SpewCase{"NullIsNil", R"({"PodDeviceEntries":null,"RegisteredDevices":null})",
                 kHead + "<nil>" + kReg + "<nil>}"},
        SpewCase{"EmptyListsAndMaps", R"({"PodDeviceEntries":[],"RegisteredDevices":{}})",
                 kHead + "[]" + kReg + "map[]}"},
        SpewCase{"RegisteredKeysSortBytewise",
                 R"({"RegisteredDevices":{"b":["x","y"],"a":[],"B":null,"é":["z"]}})",
                 kHead + "[]" + kReg + "map[B:<nil> a:[] b:[x y] é:[z]]}"},
        SpewCase{"NumaKeysSortNumerically",
                 "{\"PodDeviceEntries\":[" +
                     entry_json(R"({"10":["d"],"2":["c"],"-1":["a"],"0":[],"1":null})", "") + "]}",
                 kHead + "[" + entry_spew("(checkpoint.DevicesPerNUMA)map[-1:[a] 0:[] 1:<nil> 2:[c] 10:[d]]", "<nil>") +
                     "]" + kReg + "map[]}"},
        // Go's ParseInt accepts a sign and leading zeros; the key prints as the number.
        SpewCase{"NumaKeysPrintAsNumbers",
                 "{\"PodDeviceEntries\":[" + entry_json(R"({"+3":["x"],"007":["y"],"-0":[]})", "") + "]}",
                 kHead + "[" + entry_spew("(checkpoint.DevicesPerNUMA)map[0:[] 3:[x] 7:[y]]", "<nil>") + "]" + kReg +
                     "map[]}"},
        SpewCase{"NumaKeysSpanInt64",
                 "{\"PodDeviceEntries\":[" +
                     entry_json(R"({"9223372036854775807":[],"-9223372036854775808":[]})", "") + "]}",
                 kHead + "[" +
                     entry_spew("(checkpoint.DevicesPerNUMA)map[-9223372036854775808:[] 9223372036854775807:[]]",
                                "<nil>") +
                     "]" + kReg + "map[]}"},
        SpewCase{"NullStringsAreEmpty",
                 R"({"PodDeviceEntries":[{"PodUID":"p","ContainerName":null,"DeviceIDs":{"0":["a",null]}}]})",
                 kHead +
                     "[{PodUID:(string)p ContainerName:(string) ResourceName:(string) "
                     "DeviceIDs:(checkpoint.DevicesPerNUMA)map[0:[a ]] AllocResp:([]uint8)<nil>}]" +
                     kReg + "map[]}"},
        SpewCase{"NullEntryIsAZeroEntry", R"({"PodDeviceEntries":[null]})",
                 kHead +
                     "[{PodUID:(string) ContainerName:(string) ResourceName:(string) "
                     "DeviceIDs:(checkpoint.DevicesPerNUMA)<nil> AllocResp:([]uint8)<nil>}]" +
                     kReg + "map[]}"},
        SpewCase{"AllocRespBytesInDecimal",
                 "{\"PodDeviceEntries\":[" + entry_json("{}", R"(,"AllocResp":"CgD/")") + "," +
                     entry_json("null", R"(,"AllocResp":"")") + "]}",
                 kHead + "[" + entry_spew("(checkpoint.DevicesPerNUMA)map[]", "[10 0 255]") + " " +
                     entry_spew("(checkpoint.DevicesPerNUMA)<nil>", "[]") + "]" + kReg + "map[]}"},
        SpewCase{"LegacyListSchema",
                 "{\"PodDeviceEntries\":[" + entry_json(R"(["b","a::1"])", "") + "," + entry_json("null", "") + "]}",
                 kHead + "[" + entry_spew("([]string)[b a::1]", "<nil>") + " " + entry_spew("([]string)<nil>", "<nil>") +
                     "]" + kReg + "map[]}"},
        // kubelet verifies old files by renaming its V1 type names, in the data too.
        SpewCase{"LegacyRenamesV1TypeNamesEverywhere",
                 R"({"PodDeviceEntries":[{"PodUID":"PodDevicesEntryV1","DeviceIDs":[]}]})",
                 kHead +
                     "[{PodUID:(string)PodDevicesEntry ContainerName:(string) ResourceName:(string) "
                     "DeviceIDs:([]string)[] AllocResp:([]uint8)<nil>}]" +
                     kReg + "map[]}"},
        SpewCase{"StringsAreVerbatim",
                 R"({"RegisteredDevices":{"a b:c]":["x\ny","\"q\"","\u0000"]}})",
                 kHead + "[]" + kReg + "map[a b:c]:[x\ny \"q\" " + std::string(1, '\0') + "]]}"}),
    [](const ::testing::TestParamInfo<SpewCase>& info) { return info.param.name; });

TEST(CheckpointParse, KubeletWrittenFixtureIsValidAndDecoded) {
  Checkpoint cp = parse_ok(fixture("one-pod.json"));
  EXPECT_TRUE(cp.checksum_valid);
  EXPECT_EQ(cp.computed_checksum, 3117741812u);
  EXPECT_FALSE(cp.legacy_device_ids);
  EXPECT_FALSE(cp.boot_id.has_value());
  EXPECT_TRUE(cp.entry_errors.empty());
  ASSERT_EQ(cp.entries.size(), 1u);
  const AllocationEntry& e = cp.entries[0];
  EXPECT_EQ(e.pod_uid, "3f1c9a2e-8d4b-4c6a-9e2f-7b1d5c3a9e10");
  EXPECT_EQ(e.container_name, "trainer");
  EXPECT_EQ(e.resource, "nvidia.com/gpu");
  EXPECT_EQ(e.device_ids, std::vector<std::string>{"GPU-a1b2c3d4-e5f6-4711-8899-aabbccddeeff"});
  EXPECT_EQ(e.envs, (std::map<std::string, std::string>{
                        {"NVIDIA_VISIBLE_DEVICES", "GPU-a1b2c3d4-e5f6-4711-8899-aabbccddeeff"}}));
  EXPECT_EQ(e.device_specs, (std::vector<DeviceSpec>{{"/dev/nvidiactl", "/dev/nvidiactl", "rw"},
                                                     {"/dev/nvidia-uvm", "/dev/nvidia-uvm", "rw"},
                                                     {"/dev/nvidia1", "/dev/nvidia1", "rw"}}));
  EXPECT_FALSE(e.alloc_resp_error.has_value());
  EXPECT_EQ(cp.registered_devices.at("nvidia.com/gpu").size(), 2u);
}

// Every committed fixture: does it parse, is its checksum verifiable and right, what is kept.
struct FixtureCase {
  const char* file;
  bool checksum_valid;
  bool verifiable;
  bool legacy;
  std::size_t entries;
  std::size_t entry_errors;
};

void PrintTo(const FixtureCase& c, std::ostream* os) { *os << c.file; }

class CheckpointFixture : public ::testing::TestWithParam<FixtureCase> {};

TEST_P(CheckpointFixture, ParsesAsExpected) {
  const FixtureCase& c = GetParam();
  Checkpoint cp = parse_ok(fixture(c.file));
  EXPECT_EQ(cp.checksum_valid, c.checksum_valid);
  EXPECT_EQ(!cp.checksum_unverifiable.has_value(), c.verifiable) << cp.checksum_unverifiable.value_or("");
  EXPECT_EQ(cp.legacy_device_ids, c.legacy);
  EXPECT_EQ(cp.entries.size(), c.entries);
  EXPECT_EQ(cp.entry_errors.size(), c.entry_errors);
}

INSTANTIATE_TEST_SUITE_P(
    Files, CheckpointFixture,
    ::testing::Values(FixtureCase{"legacy-list.json", true, true, true, 1, 0},
                      FixtureCase{"multi-numa-replicas.json", true, true, false, 1, 0},
                      FixtureCase{"null-entries.json", true, true, false, 0, 0},
                      FixtureCase{"mig-entry.json", true, true, false, 4, 0},
                      FixtureCase{"invalid-checksum.json", false, true, false, 1, 0},
                      FixtureCase{"truncated-protobuf.json", true, true, false, 1, 1},
                      FixtureCase{"bad-base64.json", false, false, false, 1, 1},
                      FixtureCase{"bad-entry-shapes.json", false, false, false, 1, 3}),
    [](const ::testing::TestParamInfo<FixtureCase>& info) {
      std::string name = info.param.file;
      name = name.substr(0, name.find('.'));
      for (char& ch : name)
        if (ch == '-') ch = '_';
      return name;
    });

TEST(CheckpointParse, LegacyListSchema) {
  Checkpoint cp = parse_ok(fixture("legacy-list.json"));
  ASSERT_EQ(cp.entries.size(), 1u);
  EXPECT_EQ(cp.entries[0].device_ids, (std::vector<std::string>{kGpuB, kGpuA}));
  EXPECT_EQ(cp.entries[0].envs.at("NVIDIA_VISIBLE_DEVICES"), std::string(kGpuB) + "," + kGpuA);
}

TEST(CheckpointParse, DeduplicatesAcrossNumaNodesInNumericOrderAndStripsReplicas) {
  Checkpoint cp = parse_ok(fixture("multi-numa-replicas.json"));
  ASSERT_EQ(cp.entries.size(), 1u);
  // -1: A::0 | 0: A::2, C | 1: B::0, A::1 | 2: null | 10: D::3
  EXPECT_EQ(cp.entries[0].device_ids, (std::vector<std::string>{kGpuA, kGpuC, kGpuB, kGpuD}));
  // Registered devices are reported as written, replicas included.
  EXPECT_EQ(cp.registered_devices.at("nvidia.com/gpu").size(), 6u);
  EXPECT_EQ(cp.registered_devices.at("nvidia.com/gpu")[0], std::string(kGpuA) + "::0");
}

TEST(CheckpointParse, NullEntriesAndNullRegisteredLists) {
  Checkpoint cp = parse_ok(fixture("null-entries.json"));
  EXPECT_TRUE(cp.entries.empty());
  EXPECT_TRUE(cp.registered_devices.at("nvidia.com/gpu").empty());
  EXPECT_TRUE(cp.registered_devices.at("nvidia.com/mig-1g.10gb").empty());
  EXPECT_EQ(cp.registered_devices.at("Nvidia.com/gpu"), std::vector<std::string>{kGpuA});
}

TEST(CheckpointParse, MigEntryWithDeviceSpecsCdiAndAnnotations) {
  Checkpoint cp = parse_ok(fixture("mig-entry.json"));
  EXPECT_EQ(cp.boot_id, "2f9c6d1e-8a4b-4c3d-9e2f-1a0b3c4d5e6f");
  ASSERT_EQ(cp.entries.size(), 4u);
  const AllocationEntry& init = cp.entries[0];
  EXPECT_EQ(init.container_name, "init-check");
  EXPECT_EQ(init.resource, "nvidia.com/mig-1g.10gb");
  EXPECT_EQ(init.device_ids, std::vector<std::string>{kMig});
  EXPECT_EQ(init.envs.at("NVIDIA_VISIBLE_DEVICES"), kMig);
  EXPECT_EQ(init.envs.at("NVIDIA_MIG_CONFIG_DEVICES"), "all");
  ASSERT_EQ(init.device_specs.size(), 4u);
  EXPECT_EQ(init.device_specs[2],
            (DeviceSpec{"/dev/nvidia-caps/nvidia-cap12", "/dev/nvidia-caps/nvidia-cap12", "r"}));
  EXPECT_EQ(init.cdi_devices, std::vector<std::string>{std::string("nvidia.com/gpu=") + kMig});
  EXPECT_EQ(init.annotations.at("cdi.k8s.io/nvidia-device-plugin_5b8d"), std::string("nvidia.com/gpu=") + kMig);
  EXPECT_EQ(cp.entries[1].container_name, "infer");
  // DeviceIDs {} with AllocResp "", and DeviceIDs null with no AllocResp: kept, holding nothing.
  EXPECT_TRUE(cp.entries[2].device_ids.empty());
  EXPECT_TRUE(cp.entries[2].envs.empty());
  EXPECT_FALSE(cp.entries[2].alloc_resp_error.has_value());
  EXPECT_TRUE(cp.entries[3].device_ids.empty());
  EXPECT_FALSE(cp.entries[3].alloc_resp_error.has_value());
}

TEST(CheckpointParse, TruncatedAllocRespKeepsTheEntryAndTheChecksum) {
  // kubelet hashes AllocResp's bytes without decoding them: the file is still valid.
  Checkpoint cp = parse_ok(fixture("truncated-protobuf.json"));
  EXPECT_TRUE(cp.checksum_valid);
  ASSERT_EQ(cp.entries.size(), 1u);
  EXPECT_EQ(cp.entries[0].device_ids, std::vector<std::string>{kGpuA});
  EXPECT_TRUE(cp.entries[0].envs.empty());
  ASSERT_TRUE(cp.entries[0].alloc_resp_error.has_value());
  EXPECT_TRUE(contains(*cp.entries[0].alloc_resp_error, "ContainerAllocateResponse"));
  ASSERT_EQ(cp.entry_errors.size(), 1u);
  EXPECT_FALSE(cp.entry_errors[0].entry_dropped);
  EXPECT_EQ(cp.entry_errors[0].index, 0u);
  EXPECT_EQ(cp.entry_errors[0].container_name, "main");
}

TEST(CheckpointParse, BadBase64KeepsTheEntryButNoChecksumCanBeComputed) {
  Checkpoint cp = parse_ok(fixture("bad-base64.json"));
  EXPECT_FALSE(cp.checksum_valid);
  EXPECT_EQ(cp.computed_checksum, 0u);
  ASSERT_TRUE(cp.checksum_unverifiable.has_value());
  EXPECT_TRUE(contains(*cp.checksum_unverifiable, "PodDeviceEntries[0]"));
  EXPECT_TRUE(contains(*cp.checksum_unverifiable, "base64"));
  ASSERT_EQ(cp.entries.size(), 1u);
  EXPECT_EQ(cp.entries[0].device_ids, std::vector<std::string>{kGpuA});
  ASSERT_TRUE(cp.entries[0].alloc_resp_error.has_value());
  EXPECT_TRUE(contains(*cp.entries[0].alloc_resp_error, "'*' at offset 8"));
  ASSERT_EQ(cp.entry_errors.size(), 1u);
  EXPECT_FALSE(cp.entry_errors[0].entry_dropped);
  EXPECT_EQ(cp.entry_errors[0].pod_uid, "7a7a7a7a-0000-4000-8000-000000000002");
}

TEST(CheckpointParse, MisshapenEntriesAreDroppedWithTheirIndex) {
  Checkpoint cp = parse_ok(fixture("bad-entry-shapes.json"));
  ASSERT_EQ(cp.entries.size(), 1u);
  EXPECT_EQ(cp.entries[0].container_name, "good");
  ASSERT_EQ(cp.entry_errors.size(), 3u);
  for (const auto& error : cp.entry_errors) EXPECT_TRUE(error.entry_dropped);
  EXPECT_EQ(cp.entry_errors[0].index, 0u);
  EXPECT_EQ(cp.entry_errors[0].container_name, "numeric");
  EXPECT_TRUE(contains(cp.entry_errors[0].message, "DeviceIDs is a number"));
  EXPECT_EQ(cp.entry_errors[1].index, 1u);
  EXPECT_EQ(cp.entry_errors[1].container_name, "no-uid");
  EXPECT_TRUE(contains(cp.entry_errors[1].message, "PodUID is missing"));
  EXPECT_EQ(cp.entry_errors[2].index, 3u);
  EXPECT_TRUE(contains(cp.entry_errors[2].message, "\"zero\" is not a NUMA node"));
  ASSERT_TRUE(cp.checksum_unverifiable.has_value());
  EXPECT_TRUE(contains(*cp.checksum_unverifiable, "PodDeviceEntries[0]"));
}

// Values kubelet's json.Unmarshal would refuse: the file cannot be verified, what is
// usable is still read.
struct UnverifiableCase {
  const char* name;
  std::string data;
  std::string reason;  // part of checksum_unverifiable
  std::size_t entries;
};

void PrintTo(const UnverifiableCase& c, std::ostream* os) { *os << c.name; }

class CheckpointUnverifiable : public ::testing::TestWithParam<UnverifiableCase> {};

TEST_P(CheckpointUnverifiable, SaysWhy) {
  const UnverifiableCase& c = GetParam();
  Checkpoint cp = parse_ok(R"({"Checksum":1,"Data":)" + c.data + "}");
  EXPECT_FALSE(cp.checksum_valid);
  EXPECT_EQ(cp.computed_checksum, 0u);
  ASSERT_TRUE(cp.checksum_unverifiable.has_value());
  EXPECT_TRUE(contains(*cp.checksum_unverifiable, c.reason));
  EXPECT_EQ(cp.entries.size(), c.entries);
}

INSTANTIATE_TEST_SUITE_P(
    GoRejects, CheckpointUnverifiable,
    ::testing::Values(
        UnverifiableCase{"PodUidNotAString", "{\"PodDeviceEntries\":[{\"PodUID\":5}]}",
                         "PodDeviceEntries[0]: PodUID is a number", 0},
        UnverifiableCase{"EntryNotAnObject", R"({"PodDeviceEntries":["x"]})", "entry is a string", 0},
        UnverifiableCase{"IdNotAString", "{\"PodDeviceEntries\":[" + entry_json(R"({"0":[1]})", "") + "]}",
                         "DeviceIDs[\"0\"][0] is a number", 0},
        UnverifiableCase{"NumaKeyBeyondInt64",
                         "{\"PodDeviceEntries\":[" + entry_json(R"({"9223372036854775808":["a"]})", "") + "]}",
                         "key \"9223372036854775808\" is not a NUMA node number", 0},
        UnverifiableCase{"MixedSchemas",
                         "{\"PodDeviceEntries\":[" + entry_json(R"({"0":["a"]})", "") + "," +
                             entry_json(R"(["b"])", "") + "]}",
                         "PodDeviceEntries[1]: DeviceIDs mixes", 2},
        UnverifiableCase{"SameNumaNodeTwice",
                         "{\"PodDeviceEntries\":[" + entry_json(R"({"1":["a"],"01":["b"]})", "") + "]}",
                         "keys \"01\" and \"1\" name the same NUMA node", 1},
        UnverifiableCase{"AllocRespNotAString",
                         "{\"PodDeviceEntries\":[" + entry_json("{}", R"(,"AllocResp":[10])") + "]}",
                         "AllocResp is a list", 1},
        UnverifiableCase{"RegisteredListNotAList", R"({"RegisteredDevices":{"nvidia.com/gpu":"GPU-1"}})",
                         "Data.RegisteredDevices[\"nvidia.com/gpu\"] is a string", 0}),
    [](const ::testing::TestParamInfo<UnverifiableCase>& info) { return info.param.name; });

TEST(CheckpointParse, SameNumaNodeTwiceStillYieldsBothIds) {
  Checkpoint cp = parse_ok(R"({"Checksum":1,"Data":{"PodDeviceEntries":[)" +
                           entry_json(R"({"1":["a"],"01":["b","a"]})", "") + "]}}");
  ASSERT_EQ(cp.entries.size(), 1u);
  EXPECT_EQ(cp.entries[0].device_ids, (std::vector<std::string>{"b", "a"}));
}

struct FileErrorCase {
  const char* name;
  std::string text;
  std::string message;  // part of the error
};

void PrintTo(const FileErrorCase& c, std::ostream* os) { *os << c.name; }

class CheckpointFileError : public ::testing::TestWithParam<FileErrorCase> {};

TEST_P(CheckpointFileError, IsAnError) {
  auto cp = parse_checkpoint(GetParam().text);
  ASSERT_FALSE(cp.ok());
  EXPECT_TRUE(contains(cp.error().message, GetParam().message));
}

INSTANTIATE_TEST_SUITE_P(
    Cases, CheckpointFileError,
    ::testing::Values(
        FileErrorCase{"Truncated", fixture("malformed.json"), "cannot parse checkpoint JSON"},
        FileErrorCase{"Empty", "", "cannot parse checkpoint JSON"},
        FileErrorCase{"TrailingGarbage", R"({"Data":{},"Checksum":1} x)", "cannot parse checkpoint JSON"},
        FileErrorCase{"NotAnObject", "[1]", "checkpoint is a list"},
        FileErrorCase{"NoData", R"({"Checksum":1})", "no Data"},
        FileErrorCase{"DataNull", R"({"Data":null,"Checksum":1})", "Data is null"},
        FileErrorCase{"NoChecksum", R"({"Data":{}})", "no Checksum"},
        FileErrorCase{"ChecksumNegative", R"({"Data":{},"Checksum":-1})", "Checksum -1 is not"},
        FileErrorCase{"ChecksumFloat", R"({"Data":{},"Checksum":1.0})", "not an unsigned 32-bit"},
        FileErrorCase{"ChecksumTooLarge", R"({"Data":{},"Checksum":4294967296})", "not an unsigned 32-bit"},
        FileErrorCase{"ChecksumHuge", R"({"Data":{},"Checksum":1e400})", "cannot parse checkpoint JSON"},
        FileErrorCase{"ChecksumString", R"({"Data":{},"Checksum":"1"})", "Checksum is a string"},
        FileErrorCase{"EntriesNotAList", R"({"Data":{"PodDeviceEntries":{}},"Checksum":1})",
                      "Data.PodDeviceEntries is an object"},
        FileErrorCase{"RegisteredNotAnObject", R"({"Data":{"RegisteredDevices":[]},"Checksum":1})",
                      "Data.RegisteredDevices is a list"}),
    [](const ::testing::TestParamInfo<FileErrorCase>& info) { return info.param.name; });

TEST(CheckpointParse, LargestChecksumAndBootId) {
  Checkpoint cp = parse_ok(R"({"Data":{},"Checksum":4294967295,"BootID":"b1"})");
  EXPECT_EQ(cp.stored_checksum, 4294967295u);
  EXPECT_EQ(cp.boot_id, "b1");
}

TEST(CheckpointWrite, ReproducesKubeletsFileByteForByte) {
  std::string kubelets = fixture("one-pod.json");
  while (!kubelets.empty() && (kubelets.back() == '\n' || kubelets.back() == '\r')) kubelets.pop_back();
  Checkpoint cp = parse_ok(kubelets);
  ASSERT_EQ(cp.entries.size(), 1u);
  const AllocationEntry& e = cp.entries[0];
  CheckpointWriteEntry w{e.pod_uid, e.container_name, e.resource, {{0, e.device_ids}},
                         AllocResp{e.envs, e.device_specs, e.cdi_devices, e.annotations}};
  EXPECT_EQ(write_checkpoint({w}, cp.registered_devices), kubelets);
}

TEST(CheckpointWrite, RoundTripsThroughTheParserWithAValidChecksum) {
  AllocResp resp;
  resp.envs = {{"NVIDIA_VISIBLE_DEVICES", std::string(kGpuA) + "," + kGpuB}, {"B", "2"}};
  resp.devices = {{"/dev/nvidia0", "/dev/nvidia0", "rw"}, {"/dev/nvidia3", "/dev/nvidia3", "rwm"}};
  resp.cdi_devices = {"nvidia.com/gpu=0"};
  resp.annotations = {{"a", "1"}};
  std::vector<CheckpointWriteEntry> entries{
      {"uid-1", "c1", "nvidia.com/gpu", {{1, {kGpuB, std::string(kGpuA) + "::2"}}, {-1, {kGpuA}}}, resp},
      {"uid-2", "c2", "nvidia.com/mig-1g.10gb", {}, {}},
  };
  std::map<std::string, std::vector<std::string>> registered{{"nvidia.com/gpu", {kGpuA, kGpuB}},
                                                             {"nvidia.com/mig-1g.10gb", {}}};
  std::string text = write_checkpoint(entries, registered, std::string("boot-7"));
  Checkpoint cp = parse_ok(text);
  EXPECT_TRUE(cp.checksum_valid);
  EXPECT_EQ(cp.boot_id, "boot-7");
  EXPECT_EQ(cp.registered_devices, registered);
  ASSERT_EQ(cp.entries.size(), 2u);
  EXPECT_EQ(cp.entries[0].device_ids, (std::vector<std::string>{kGpuA, kGpuB}));
  EXPECT_EQ(cp.entries[0].envs, resp.envs);
  EXPECT_EQ(cp.entries[0].device_specs, resp.devices);
  EXPECT_EQ(cp.entries[0].cdi_devices, resp.cdi_devices);
  EXPECT_EQ(cp.entries[0].annotations, resp.annotations);
  EXPECT_EQ(cp.entries[1].resource, "nvidia.com/mig-1g.10gb");
  EXPECT_TRUE(cp.entries[1].device_ids.empty());
  EXPECT_TRUE(cp.entry_errors.empty());
}

TEST(CheckpointWrite, NoEntriesIsNullAsKubeletWritesIt) {
  std::string text = write_checkpoint({}, {{"nvidia.com/gpu", {kGpuD}}});
  EXPECT_EQ(text,
            R"({"Data":{"PodDeviceEntries":null,"RegisteredDevices":{"nvidia.com/gpu":["GPU-0650a168-e770-3ea8-8ac3-8a1d419763e0"]}},"Checksum":3952659280})");
}

TEST(CheckpointWrite, InvalidUtf8IsReplacedAndTheChecksumStillHolds) {
  std::string text = write_checkpoint({{"uid\xff", "c", "r", {{0, {"GPU-\xc3"}}}, {}}}, {}, std::string("\xfe"));
  Checkpoint cp = parse_ok(text);
  EXPECT_TRUE(cp.checksum_valid);
  ASSERT_EQ(cp.entries.size(), 1u);
  EXPECT_EQ(cp.entries[0].pod_uid, "uid\xef\xbf\xbd");
}

}  // namespace
}  // namespace gdw
