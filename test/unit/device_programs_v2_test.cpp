// The pure half of the cgroup v2 backend: rule lists with runc's semantics (last match
// wins, no match denies), runc's built-in devices, and which desired devices the attached
// programs still deny.
#include "backend/device_programs_v2.h"

#include <gtest/gtest.h>

namespace gdw {
namespace {

OciDeviceCgroupRule allow(DeviceType type, std::uint32_t major, std::uint32_t minor, std::uint8_t access) {
  return {true, DeviceRule{type, major, minor, access}};
}
OciDeviceCgroupRule deny(DeviceType type, std::uint32_t major, std::uint32_t minor, std::uint8_t access) {
  return {false, DeviceRule{type, major, minor, access}};
}
const OciDeviceCgroupRule kDenyAll = deny(DeviceType::kAll, kAnyNumber, kAnyNumber, kAccessAll);

constexpr DeviceNumber kGpu0{DeviceType::kChar, 195, 0};
constexpr DeviceNumber kGpu1{DeviceType::kChar, 195, 1};
constexpr DeviceNumber kNull{DeviceType::kChar, 1, 3};
constexpr DeviceNumber kTun{DeviceType::kChar, 10, 200};
constexpr DeviceNumber kSda{DeviceType::kBlock, 8, 0};

WantedDevice want(DeviceNumber dev, std::uint8_t access = kAccessReadWrite, const std::string& name = "nvidia0") {
  return WantedDevice{dev, access, name, "GPU-test"};
}

// What containerd's CRI puts into linux.resources.devices for a GPU container whose
// device plugin handed over /dev/nvidia0 and /dev/nvidiactl.
std::vector<OciDeviceCgroupRule> gpu0_spec() {
  return {kDenyAll, allow(DeviceType::kChar, 195, 0, kAccessReadWrite | kAccessMknod),
          allow(DeviceType::kChar, 195, 255, kAccessReadWrite | kAccessMknod)};
}

TEST(OciRulesAllow, NoRulesOrNoMatchDenies) {
  EXPECT_FALSE(oci_rules_allow({}, kNull, kAccessRead));
  EXPECT_FALSE(oci_rules_allow({allow(DeviceType::kChar, 1, 5, kAccessAll)}, kNull, kAccessRead));
}

TEST(OciRulesAllow, LastMatchingRuleWins) {
  auto gpu_rw = allow(DeviceType::kChar, 195, 0, kAccessReadWrite);
  EXPECT_TRUE(oci_rules_allow({kDenyAll, gpu_rw}, kGpu0, kAccessReadWrite));
  EXPECT_FALSE(oci_rules_allow({gpu_rw, kDenyAll}, kGpu0, kAccessReadWrite));
  auto all_gpus = allow(DeviceType::kChar, 195, kAnyNumber, kAccessReadWrite);
  auto no_gpu0 = deny(DeviceType::kChar, 195, 0, kAccessReadWrite);
  EXPECT_FALSE(oci_rules_allow({kDenyAll, all_gpus, no_gpu0}, kGpu0, kAccessRead));
  EXPECT_TRUE(oci_rules_allow({kDenyAll, all_gpus, no_gpu0}, kGpu1, kAccessRead));
  // A later rule that does not match leaves the earlier verdict in force.
  EXPECT_TRUE(oci_rules_allow({kDenyAll, gpu_rw, deny(DeviceType::kChar, 195, 1, kAccessAll)}, kGpu0, kAccessRead));
}

TEST(OciRulesAllow, WildcardNumbersMatchAnyNumber) {
  auto pts = allow(DeviceType::kChar, 136, kAnyNumber, kAccessAll);
  EXPECT_TRUE(oci_rules_allow({kDenyAll, pts}, {DeviceType::kChar, 136, 7}, kAccessReadWrite));
  EXPECT_FALSE(oci_rules_allow({kDenyAll, pts}, {DeviceType::kChar, 137, 7}, kAccessReadWrite));
  auto any_minor_3 = allow(DeviceType::kChar, kAnyNumber, 3, kAccessAll);
  EXPECT_TRUE(oci_rules_allow({any_minor_3}, kNull, kAccessRead));
  EXPECT_FALSE(oci_rules_allow({any_minor_3}, kGpu0, kAccessRead));
}

TEST(OciRulesAllow, TypeAllMatchesCharAndBlockButCharRuleNotBlock) {
  auto everything = allow(DeviceType::kAll, kAnyNumber, kAnyNumber, kAccessAll);
  EXPECT_TRUE(oci_rules_allow({everything}, kSda, kAccessReadWrite));
  EXPECT_TRUE(oci_rules_allow({everything}, kGpu0, kAccessReadWrite));
  auto char_8_0 = allow(DeviceType::kChar, 8, 0, kAccessAll);
  EXPECT_FALSE(oci_rules_allow({char_8_0}, kSda, kAccessRead));
  EXPECT_TRUE(oci_rules_allow({allow(DeviceType::kBlock, 8, kAnyNumber, kAccessRead)}, kSda, kAccessRead));
}

TEST(OciRulesAllow, RequestedAccessMustBeWithinTheRule) {
  auto read_only = allow(DeviceType::kChar, 195, 0, kAccessRead);
  EXPECT_TRUE(oci_rules_allow({read_only}, kGpu0, kAccessRead));
  EXPECT_FALSE(oci_rules_allow({read_only}, kGpu0, kAccessReadWrite));
  EXPECT_FALSE(oci_rules_allow({read_only}, kGpu0, kAccessMknod));
  auto mknod_any = allow(DeviceType::kChar, kAnyNumber, kAnyNumber, kAccessMknod);
  EXPECT_TRUE(oci_rules_allow({mknod_any}, kGpu0, kAccessMknod));
  EXPECT_FALSE(oci_rules_allow({mknod_any}, kGpu0, kAccessRead));
  // A deny for write only does not match a read: the earlier allow still decides it.
  auto rw = allow(DeviceType::kChar, 195, 0, kAccessReadWrite);
  auto no_write = deny(DeviceType::kChar, 195, 0, kAccessWrite);
  EXPECT_TRUE(oci_rules_allow({rw, no_write}, kGpu0, kAccessRead));
  EXPECT_FALSE(oci_rules_allow({rw, no_write}, kGpu0, kAccessWrite));
}

TEST(UnionRules, SpecRulesFirstInOrderThenOneAllowPerDesiredDevice) {
  auto spec = gpu0_spec();
  auto rules = union_rules(spec, {want(kGpu1), want({DeviceType::kChar, 237, 0}, kAccessRead, "nvidia-uvm")});
  ASSERT_EQ(rules.size(), spec.size() + 2);
  for (std::size_t i = 0; i < spec.size(); ++i) EXPECT_EQ(rules[i], spec[i]) << i;
  EXPECT_EQ(rules[3], allow(DeviceType::kChar, 195, 1, kAccessReadWrite));
  EXPECT_EQ(rules[4], allow(DeviceType::kChar, 237, 0, kAccessRead));
}

TEST(UnionRules, GrantsDesiredDevicesAndNothingTheSpecDeniesBeyondThem) {
  auto rules = union_rules(gpu0_spec(), {want(kGpu1)});
  EXPECT_TRUE(oci_rules_allow(rules, kGpu1, kAccessReadWrite));
  EXPECT_FALSE(oci_rules_allow(rules, kGpu1, kAccessMknod)) << "desired access is rw, not m";
  EXPECT_TRUE(oci_rules_allow(rules, kGpu0, kAccessReadWrite));
  EXPECT_FALSE(oci_rules_allow(rules, kTun, kAccessRead));
  EXPECT_FALSE(oci_rules_allow(rules, {DeviceType::kChar, 195, 2}, kAccessRead));
}

TEST(UnionRules, DesiredDeviceOverridesASpecDenyBecauseItComesLast) {
  auto rules = union_rules({kDenyAll, deny(DeviceType::kChar, 195, kAnyNumber, kAccessAll)}, {want(kGpu0)});
  EXPECT_TRUE(oci_rules_allow(rules, kGpu0, kAccessReadWrite));
  EXPECT_FALSE(oci_rules_allow(rules, kGpu1, kAccessRead));
}

TEST(RuncEnforcedRules, AppendsRuncBuiltinsAfterTheSpec) {
  auto rules = runc_enforced_rules(gpu0_spec(), {}, RuncBuiltins::kRunc1_2);
  ASSERT_EQ(rules.size(), 3u + 10u);
  EXPECT_EQ(rules[0], kDenyAll);
  EXPECT_TRUE(oci_rules_allow(rules, kNull, kAccessReadWrite));
  EXPECT_TRUE(oci_rules_allow(rules, {DeviceType::kChar, 1, 9}, kAccessRead));        // urandom
  EXPECT_TRUE(oci_rules_allow(rules, {DeviceType::kChar, 136, 42}, kAccessReadWrite));  // pts
  EXPECT_TRUE(oci_rules_allow(rules, {DeviceType::kChar, 5, 2}, kAccessReadWrite));     // ptmx
  EXPECT_TRUE(oci_rules_allow(rules, kTun, kAccessMknod)) << "runc allows mknod of any char device";
  EXPECT_TRUE(oci_rules_allow(rules, kSda, kAccessMknod));
  EXPECT_FALSE(oci_rules_allow(rules, kTun, kAccessRead)) << "runc 1.2 dropped tun from its built-ins";
  EXPECT_FALSE(oci_rules_allow(rules, kSda, kAccessRead));
  EXPECT_FALSE(oci_rules_allow(rules, kGpu1, kAccessRead));
}

TEST(RuncEnforcedRules, RuncUpTo1_1AlsoAllowsTunTap) {
  auto rules = runc_enforced_rules(gpu0_spec(), {}, RuncBuiltins::kRunc1_1);
  EXPECT_EQ(rules.size(), 3u + 11u);
  EXPECT_TRUE(oci_rules_allow(rules, kTun, kAccessReadWrite));
  EXPECT_FALSE(oci_rules_allow(rules, kGpu1, kAccessRead));
}

TEST(RuncEnforcedRules, BuiltinsOverrideASpecDenyAsInRunc) {
  auto rules = runc_enforced_rules({kDenyAll, deny(DeviceType::kChar, 1, 3, kAccessAll)}, {}, RuncBuiltins::kRunc1_2);
  EXPECT_TRUE(oci_rules_allow(rules, kNull, kAccessReadWrite));
}

TEST(RuncEnforcedRules, ABuiltinWhosePathTheSpecCreatesIsLeftToTheSpec) {
  std::vector<OciLinuxDevice> nodes{{"/dev/null", 'c', 1, 3}, {"/dev/nvidia0", 'c', 195, 0}};
  auto rules = runc_enforced_rules({kDenyAll}, nodes, RuncBuiltins::kRunc1_2);
  EXPECT_EQ(rules.size(), 1u + 9u);
  EXPECT_FALSE(oci_rules_allow(rules, kNull, kAccessRead));
  EXPECT_TRUE(oci_rules_allow(rules, {DeviceType::kChar, 1, 5}, kAccessRead)) << "/dev/zero stays";
}

AttachedDeviceProgram program(ProgramOwner owner, std::uint32_t id,
                              std::optional<std::vector<OciDeviceCgroupRule>> rules = std::nullopt) {
  AttachedDeviceProgram p;
  p.id = id;
  p.owner = owner;
  p.name = owner == ProgramOwner::kOurs ? kOurProgramName : owner == ProgramOwner::kSystemd ? "sd_devices" : "";
  p.rules = std::move(rules);
  return p;
}

TEST(DeniedByPrograms, NoProgramDeniesNothing) {
  EXPECT_TRUE(denied_by_programs({}, gpu0_spec(), {want(kGpu1)}).empty());
}

TEST(DeniedByPrograms, RuntimeProgramEnforcesTheSpec) {
  auto denied = denied_by_programs({program(ProgramOwner::kRuntime, 7)}, gpu0_spec(), {want(kGpu0), want(kGpu1)});
  ASSERT_EQ(denied.size(), 1u);
  EXPECT_EQ(denied[0].dev, kGpu1);
}

TEST(DeniedByPrograms, OursAloneAllowsWhatItWasBuiltFor) {
  auto spec = gpu0_spec();
  std::vector<WantedDevice> desired{want(kGpu1)};
  EXPECT_TRUE(denied_by_programs({program(ProgramOwner::kOurs, 9, union_rules(spec, desired))}, spec, desired).empty());
}

TEST(DeniedByPrograms, OursBuiltForAnotherDesiredSetMissesTheNewDevice) {
  auto spec = gpu0_spec();
  const auto gpu2 = want({DeviceType::kChar, 195, 2}, kAccessReadWrite, "nvidia2");
  auto ours = program(ProgramOwner::kOurs, 9, union_rules(spec, {want(kGpu1)}));
  auto denied = denied_by_programs({ours}, spec, {want(kGpu1), gpu2});
  ASSERT_EQ(denied.size(), 1u);
  EXPECT_EQ(denied[0], gpu2);
}

TEST(DeniedByPrograms, ResultsAreAndedSoASystemdProgramBesideOursStillDenies) {
  auto spec = gpu0_spec();
  std::vector<WantedDevice> desired{want(kGpu1)};
  auto ours = program(ProgramOwner::kOurs, 9, union_rules(spec, desired));
  auto denied = denied_by_programs({ours, program(ProgramOwner::kSystemd, 10)}, spec, desired);
  EXPECT_EQ(denied, desired);
}

TEST(DeniedByPrograms, OursWithUnreadableRulesIsTakenToEnforceTheSpec) {
  auto denied = denied_by_programs({program(ProgramOwner::kOurs, 9)}, gpu0_spec(), {want(kGpu1)});
  EXPECT_EQ(denied.size(), 1u);
}

TEST(DeniedByPrograms, AccessMattersNotJustTheNumber) {
  auto spec = std::vector<OciDeviceCgroupRule>{kDenyAll, allow(DeviceType::kChar, 195, 1, kAccessRead)};
  EXPECT_TRUE(denied_by_programs({program(ProgramOwner::kRuntime, 1)}, spec, {want(kGpu1, kAccessRead)}).empty());
  EXPECT_EQ(denied_by_programs({program(ProgramOwner::kRuntime, 1)}, spec, {want(kGpu1, kAccessReadWrite)}).size(), 1u);
}

TEST(ProgramOwner, NamesForLogs) {
  EXPECT_EQ(to_string(ProgramOwner::kOurs), "ours");
  EXPECT_EQ(to_string(ProgramOwner::kSystemd), "systemd");
  EXPECT_EQ(to_string(ProgramOwner::kRuntime), "runtime");
}

}  // namespace
}  // namespace gdw
