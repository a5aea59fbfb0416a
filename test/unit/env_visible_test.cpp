// NVIDIA_VISIBLE_DEVICES: parsing (bounds, all, UUIDs, indices, junk), NVML order, and the
// decision for a container without an allocation (report or restore, allocation wins).
#include "core/env_visible.h"

#include <gtest/gtest.h>

#include "core/config.h"
#include "node/container_target.h"
#include "runtime/oci_config.h"

namespace gdw {
namespace {

constexpr const char* kGpuA = "GPU-0650a168-e770-3ea8-8ac3-8a1d419763e0";  // bus 0000:41, minor 0
constexpr const char* kGpuB = "GPU-a1b2c3d4-e5f6-4711-8899-aabbccddeeff";  // bus 0000:0f, minor 1
constexpr const char* kGpuX = "GPU-99999999-e5f6-4711-8899-aabbccddeeff";  // excluded
constexpr const char* kMig = "MIG-11112222-3333-4444-5555-666677778888";

Inventory host() {
  Inventory inv;
  inv.char_majors = {{"nvidia", 195}, {"nvidiactl", 195}, {"nvidia-uvm", 237}, {"nvidia-caps", 240}};
  // Listed out of bus order on purpose: NVML order is by PCI bus id, not by minor.
  inv.gpus = {{kGpuA, 0, "0000:41:00.0", "H20", false},
              {kGpuB, 1, "0000:0f:00.0", "H20", false},
              {kGpuX, 2, "0000:01:00.0", "H20", true}};
  inv.mig_minors = {{"gpu1/gi2/access", 21}, {"gpu1/gi2/ci0/access", 22}};
  inv.migs = {{kMig, 1, 2, 0}};
  inv.dev_nodes = {{"nvidia0", {DeviceType::kChar, 195, 0}},
                   {"nvidia1", {DeviceType::kChar, 195, 1}},
                   {"nvidiactl", {DeviceType::kChar, 195, 255}},
                   {"nvidia-uvm", {DeviceType::kChar, 237, 0}}};
  return inv;
}

const DesiredPolicy kReport{{"nvidia.com/gpu"}, {"nvidiactl", "nvidia-uvm"}, EnvVisiblePolicy::kReport};
const DesiredPolicy kRestore{{"nvidia.com/gpu"}, {"nvidiactl", "nvidia-uvm"}, EnvVisiblePolicy::kRestore};

std::vector<std::string> ids_of(std::string_view value, std::vector<std::string>* unresolved = nullptr) {
  std::vector<std::string> u;
  auto ids = visible_device_ids(parse_visible_devices(value), host(), u);
  if (unresolved) *unresolved = u;
  return ids;
}

TEST(VisibleDevices, NothingForNoneVoidEmptyAndBlank) {
  for (const char* v : {"", "none", "void", "  ", " , ,"}) {
    auto r = parse_visible_devices(v);
    EXPECT_EQ(r.kind, VisibleDevicesRequest::Kind::kNothing) << v;
    EXPECT_TRUE(r.error.empty()) << v;
    EXPECT_FALSE(env_visible_gpus(v, host(), kRestore).has_value()) << v;
  }
}

TEST(VisibleDevices, AllIsEveryGpuNvmlSeesInBusOrder) {
  EXPECT_EQ(parse_visible_devices("all").kind, VisibleDevicesRequest::Kind::kAll);
  // The excluded GPU is not enumerated by NVML: not part of `all`, not an index.
  EXPECT_EQ(ids_of("all"), (std::vector<std::string>{kGpuB, kGpuA}));
}

TEST(VisibleDevices, IndicesAreNvmlOrderWhichIsPciBusOrder) {
  EXPECT_EQ(ids_of("0"), (std::vector<std::string>{kGpuB}));  // lowest bus id, though minor 1
  EXPECT_EQ(ids_of("1"), (std::vector<std::string>{kGpuA}));
  EXPECT_EQ(ids_of(" 1 , 0 ,1"), (std::vector<std::string>{kGpuA, kGpuB})) << "deduplicated, spaces ignored";
  std::vector<std::string> unresolved;
  EXPECT_TRUE(ids_of("2", &unresolved).empty()) << "index 2 would be the excluded GPU";
  ASSERT_EQ(unresolved.size(), 1u);
  EXPECT_NE(unresolved[0].find("index 2"), std::string::npos);
}

TEST(VisibleDevices, UuidListOfGpusAndMigDevices) {
  auto r = parse_visible_devices(std::string(kGpuA) + "," + kMig);
  EXPECT_EQ(r.kind, VisibleDevicesRequest::Kind::kList);
  EXPECT_EQ(r.uuids, (std::vector<std::string>{kGpuA, kMig}));
  std::vector<std::string> unresolved;
  EXPECT_EQ(ids_of(std::string(kGpuA) + ",GPU-deadbeef-0000-0000-0000-000000000000", &unresolved),
            (std::vector<std::string>{kGpuA}));
  ASSERT_EQ(unresolved.size(), 1u);
  EXPECT_NE(unresolved[0].find("not on this node"), std::string::npos);
}

TEST(VisibleDevices, MigIndicesAreReportedNotGuessed) {
  auto r = parse_visible_devices("0:1");
  EXPECT_TRUE(r.error.empty());
  EXPECT_EQ(r.unsupported.size(), 1u);
  std::vector<std::string> unresolved;
  EXPECT_TRUE(ids_of("0:1", &unresolved).empty());
  EXPECT_EQ(unresolved.size(), 1u);
}

TEST(VisibleDevices, JunkRefusesTheWholeValue) {
  for (const char* v : {"all,0", "GPU-xyz!", "../../etc", "0x1", "-1", "GPU-", "99999999999", "nvidia0", "0:"}) {
    auto r = parse_visible_devices(v);
    EXPECT_FALSE(r.error.empty()) << v;
    EXPECT_EQ(r.kind, VisibleDevicesRequest::Kind::kNothing) << v;
    EXPECT_TRUE(r.uuids.empty() && r.indices.empty()) << v;
    auto e = env_visible_gpus(v, host(), kRestore);
    ASSERT_TRUE(e.has_value()) << "a refused value is reported: " << v;
    EXPECT_TRUE(e->device_ids.empty()) << v;
    EXPECT_FALSE(e->desired.holds_gpu) << v;
    EXPECT_TRUE(e->desired.wanted.empty()) << v;
  }
}

TEST(VisibleDevices, BoundsOnLengthAndEntries) {
  std::string long_value(kMaxVisibleDevicesValue + 1, '0');
  EXPECT_NE(parse_visible_devices(long_value).error.find("longer than"), std::string::npos);
  std::string many;
  for (std::size_t i = 0; i <= kMaxVisibleDevicesEntries; ++i) many += (many.empty() ? "" : ",") + std::string("0");
  EXPECT_NE(parse_visible_devices(many).error.find("more than"), std::string::npos);
  std::string at_limit;
  for (std::size_t i = 0; i < kMaxVisibleDevicesEntries; ++i) at_limit += (at_limit.empty() ? "" : ",") + std::string("1");
  EXPECT_TRUE(parse_visible_devices(at_limit).error.empty());
  // The reported value is cut: a tenant cannot blow up `check` or the log with it.
  auto e = env_visible_gpus(long_value, host(), kReport);
  ASSERT_TRUE(e.has_value());
  EXPECT_LE(e->value.size(), 256u);
}

TEST(VisibleDevices, DesiredIsTheGpusNodesPlusControlNodes) {
  auto e = env_visible_gpus("0", host(), kRestore);
  ASSERT_TRUE(e.has_value());
  EXPECT_TRUE(e->desired.holds_gpu);
  std::vector<std::string> names;
  for (const auto& w : e->desired.wanted) names.push_back(w.name);
  EXPECT_EQ(names, (std::vector<std::string>{"nvidia1", "nvidiactl", "nvidia-uvm"}));
  auto mig = env_visible_gpus(kMig, host(), kRestore);
  ASSERT_TRUE(mig.has_value());
  names.clear();
  for (const auto& w : mig->desired.wanted) names.push_back(w.name);
  EXPECT_EQ(names, (std::vector<std::string>{"nvidia1", "nvidiactl", "nvidia-uvm", "nvidia-caps/nvidia-cap21",
                                             "nvidia-caps/nvidia-cap22"}));
}

// The pure decision in resolve_container: a bundle with NVIDIA_VISIBLE_DEVICES, with and
// without an allocation, under report and restore.
class EnvDecision : public ::testing::Test {
 protected:
  Bundle bundle(const std::string& env_value) {
    Bundle b;
    b.container_id = std::string(64, 'a');
    b.config_path = "/run/x/config.json";
    b.info.runtime = RuntimeKind::kContainerd;
    b.info.type = ContainerType::kContainer;
    b.info.pod_uid = kUid;
    b.info.pod_namespace = "ml";
    b.info.pod_name = "p";
    b.info.container_name = "c";
    b.info.nvidia_visible_devices = env_value;
    return b;
  }
  DiscoveredContainer cgroup() {
    DiscoveredContainer cg;
    cg.cgroup_dir = "/sys/fs/cgroup/devices/kubepods/burstable/pod" + std::string(kUid) + "/" + std::string(64, 'a');
    cg.pod.pod_uid = kUid;
    cg.leaf.container_id = std::string(64, 'a');
    cg.leaf.runtime = RuntimeKind::kContainerd;
    return cg;
  }
  static constexpr const char* kUid = "11111111-2222-3333-4444-555555555555";
};

TEST_F(EnvDecision, ReportedButNotWantedByDefault) {
  Bundle b = bundle("all");
  auto t = resolve_container(cgroup(), &b, AllocationIndex(), host(), kReport);
  EXPECT_EQ(t.kind, TargetKind::kNotGpu);
  ASSERT_TRUE(t.env_visible.has_value());
  EXPECT_FALSE(t.env_visible->restored);
  EXPECT_EQ(t.env_visible->device_ids, (std::vector<std::string>{kGpuB, kGpuA}));
  EXPECT_TRUE(t.desired.wanted.empty());
}

TEST_F(EnvDecision, RestoreMakesThemTheDesiredSet) {
  Bundle b = bundle(kGpuA);
  auto t = resolve_container(cgroup(), &b, AllocationIndex(), host(), kRestore);
  EXPECT_EQ(t.kind, TargetKind::kGpu);
  ASSERT_TRUE(t.env_visible.has_value());
  EXPECT_TRUE(t.env_visible->restored);
  std::vector<std::string> names;
  for (const auto& w : t.desired.wanted) names.push_back(w.name);
  EXPECT_EQ(names, (std::vector<std::string>{"nvidia0", "nvidiactl", "nvidia-uvm"}));
}

TEST_F(EnvDecision, NoneOrJunkGrantsNothingEvenWithRestore) {
  for (const char* v : {"none", "void", "", "junk"}) {
    Bundle b = bundle(v);
    auto t = resolve_container(cgroup(), &b, AllocationIndex(), host(), kRestore);
    EXPECT_EQ(t.kind, TargetKind::kNotGpu) << v;
    EXPECT_TRUE(t.desired.wanted.empty()) << v;
  }
}

TEST_F(EnvDecision, AnAllocationWinsOverTheVariable) {
  AllocationEntry e;
  e.pod_uid = kUid;
  e.container_name = "c";
  e.resource = "nvidia.com/gpu";
  e.device_ids = {kGpuB};
  AllocationIndex allocations({e}, kRestore);
  Bundle b = bundle("all");
  auto t = resolve_container(cgroup(), &b, allocations, host(), kRestore);
  EXPECT_EQ(t.kind, TargetKind::kGpu);
  EXPECT_FALSE(t.env_visible.has_value());
  for (const auto& w : t.desired.wanted) EXPECT_NE(w.name, "nvidia0") << "all would add GPU A; the allocation is B";
}

// process.env parsing in the bundle: only NVIDIA_VISIBLE_DEVICES, the last one, bounded.
TEST(OciEnv, ReadsTheLastNvidiaVisibleDevices) {
  auto info = parse_oci_config(R"({"process":{"env":["PATH=/bin","NVIDIA_VISIBLE_DEVICES=0","NVIDIA_VISIBLE_DEVICES=all",
                                   "NVIDIA_VISIBLE_DEVICES_X=1",7,null]}})");
  ASSERT_TRUE(info) << info.error().message;
  ASSERT_TRUE(info->nvidia_visible_devices.has_value());
  EXPECT_EQ(*info->nvidia_visible_devices, "all");
  auto none = parse_oci_config(R"({"process":{"env":["NVIDIA_DRIVER_CAPABILITIES=all"]}})");
  ASSERT_TRUE(none);
  EXPECT_FALSE(none->nvidia_visible_devices.has_value());
  auto empty = parse_oci_config(R"({"process":{"env":["NVIDIA_VISIBLE_DEVICES="]}})");
  ASSERT_TRUE(empty);
  EXPECT_EQ(empty->nvidia_visible_devices, std::optional<std::string>(""));
}

TEST(OciEnv, OddShapesAreNoErrorAndChangeNoIdentity) {
  for (const char* doc : {R"({"process":{"env":"NVIDIA_VISIBLE_DEVICES=all"}})", R"({"process":"x"})",
                          R"({"process":{"env":{"NVIDIA_VISIBLE_DEVICES":"all"}}})"}) {
    auto info = parse_oci_config(doc);
    ASSERT_TRUE(info) << doc;
    EXPECT_FALSE(info->nvidia_visible_devices.has_value()) << doc;
  }
  // The variable never becomes identity, whatever it holds.
  auto info = parse_oci_config(R"({"annotations":{"io.kubernetes.cri.container-type":"container",
      "io.kubernetes.cri.container-name":"c","io.kubernetes.cri.sandbox-name":"p",
      "io.kubernetes.cri.sandbox-namespace":"ns"},
      "process":{"env":["NVIDIA_VISIBLE_DEVICES=io.kubernetes.cri.sandbox-name=victim"]}})",
                               RuntimeKind::kContainerd);
  ASSERT_TRUE(info);
  EXPECT_EQ(info->pod_name, "p");
}

TEST(OciEnv, BoundedScanAndValue) {
  std::string env = "[";
  for (std::size_t i = 0; i < kMaxEnvScan; ++i) env += "\"A=1\",";
  env += "\"NVIDIA_VISIBLE_DEVICES=all\"]";
  auto info = parse_oci_config(R"({"process":{"env":)" + env + "}}");
  ASSERT_TRUE(info);
  EXPECT_FALSE(info->nvidia_visible_devices.has_value()) << "beyond the first kMaxEnvScan entries";
  EXPECT_FALSE(info->env_problem.empty());
  auto big = parse_oci_config(R"({"process":{"env":["NVIDIA_VISIBLE_DEVICES=)" + std::string(100000, '0') + "\"]}}");
  ASSERT_TRUE(big);
  ASSERT_TRUE(big->nvidia_visible_devices.has_value());
  EXPECT_EQ(big->nvidia_visible_devices->size(), kMaxEnvValue + 1);
  EXPECT_FALSE(parse_visible_devices(*big->nvidia_visible_devices).error.empty()) << "refused as too long";
}

}  // namespace
}  // namespace gdw

namespace gdw {
namespace {

TEST(EnvVisibleConfig, ReportByDefaultRestoreOptIn) {
  auto d = parse_config("", "empty.yaml");
  ASSERT_TRUE(d) << d.error().message;
  EXPECT_EQ(d->devices.env_visible, EnvVisiblePolicy::kReport);
  EXPECT_EQ(d->systemd.unit_dirs, (std::vector<std::string>{"/run/systemd/system.control", "/run/systemd/transient"}));
  auto r = parse_config("devices:\n  env_visible: restore\nsystemd:\n  unit_dirs: [/x/control]\n", "r.yaml");
  ASSERT_TRUE(r) << r.error().message;
  EXPECT_EQ(r->devices.env_visible, EnvVisiblePolicy::kRestore);
  EXPECT_EQ(r->systemd.unit_dirs, (std::vector<std::string>{"/x/control"}));
  EXPECT_FALSE(parse_config("devices:\n  env_visible: grant\n", "bad.yaml"));
  EXPECT_FALSE(parse_config("systemd:\n  unit_dirs: [run/systemd]\n", "bad.yaml"));
}

}  // namespace
}  // namespace gdw
