// The pure half of the cgroup v2 backend: rule lists with runc's semantics (last match
// wins, no match denies), which wanted devices the attached programs deny (by running
// their code), and the repair plan: only denying programs are wrapped.
#include "backend/device_programs_v2.h"

#include <gtest/gtest.h>

#include "core/config.h"
#include "runtime/cgroup_names.h"

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
constexpr DeviceNumber kSda{DeviceType::kBlock, 8, 0};

WantedDevice want(DeviceNumber dev, std::uint8_t access = kAccessReadWrite, const std::string& name = "nvidia0") {
  return WantedDevice{dev, access, name, "GPU-test"};
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

AttachedDeviceProgram program(ProgramOwner owner, std::uint32_t id, const std::vector<OciDeviceCgroupRule>& rules) {
  AttachedDeviceProgram p;
  p.id = id;
  p.owner = owner;
  p.name = owner == ProgramOwner::kOurs ? kOurProgramName : owner == ProgramOwner::kSystemd ? "sd_devices" : "";
  p.code = compile_device_rules(rules);
  p.inner = p.code;
  return p;
}

TEST(DeniedByPrograms, NoProgramDeniesNothing) { EXPECT_TRUE(denied_by_programs({}, {want(kGpu1)}).empty()); }

TEST(DeniedByPrograms, EachProgramIsJudgedByItsOwnCodeAndResultsAreAnded) {
  auto runtime = program(ProgramOwner::kRuntime, 7, {kDenyAll, allow(DeviceType::kChar, 195, kAnyNumber, kAccessAll)});
  auto agent = program(ProgramOwner::kRuntime, 8, {allow(DeviceType::kAll, kAnyNumber, kAnyNumber, kAccessAll),
                                                    deny(DeviceType::kChar, 195, 1, kAccessAll)});
  EXPECT_TRUE(denied_by_programs({runtime}, {want(kGpu0), want(kGpu1)}).empty());
  EXPECT_EQ(denied_by_programs({runtime, agent}, {want(kGpu0), want(kGpu1)}), std::vector<WantedDevice>{want(kGpu1)});
}

TEST(DeniedByPrograms, AProgramWithoutReadableCodeDenies) {
  AttachedDeviceProgram unreadable;
  unreadable.id = 3;
  EXPECT_EQ(denied_by_programs({unreadable}, {want(kGpu0)}).size(), 1u);
}

TEST(DeviceProgramsSnapshot, ALookDeniesWhatAnyProgramInEitherCgroupDenies) {
  // A crun container: its own cgroup's program allows both GPUs, crun's sub-cgroup's
  // denies GPU 1; both run for the container's processes.
  DeviceProgramsSnapshot look;
  look.cgroups.push_back({"", 0, {program(ProgramOwner::kSystemd, 4, {allow(DeviceType::kAll, kAnyNumber, kAnyNumber, kAccessAll)})}, nullptr});
  look.cgroups.push_back({kCrunSubgroup, 0,
                          {program(ProgramOwner::kRuntime, 5, {kDenyAll, allow(DeviceType::kChar, 195, 0, kAccessAll)}),
                           program(ProgramOwner::kOurs, 6, {allow(DeviceType::kAll, kAnyNumber, kAnyNumber, kAccessAll)})},
                          nullptr});
  EXPECT_EQ(look.denied({want(kGpu0), want(kGpu1)}), std::vector<WantedDevice>{want(kGpu1)});
  EXPECT_EQ(look.denied({want(kGpu1), want(kGpu0)}), std::vector<WantedDevice>{want(kGpu1)}) << "in the wanted order";
  EXPECT_EQ(look.denied({want(kGpu0)}), denied_by_programs(look.all(), {want(kGpu0)}));
  EXPECT_TRUE(DeviceProgramsSnapshot{}.denied({want(kGpu0)}).empty()) << "no program denies nothing";

  const ProgramCounts counts = look.count_by_owner();
  EXPECT_EQ(counts[ProgramOwner::kOurs], 1u);
  EXPECT_EQ(counts[ProgramOwner::kSystemd], 1u);
  EXPECT_EQ(counts[ProgramOwner::kRuntime], 1u);
  EXPECT_EQ(count_by_owner(look.cgroups[1].programs)[ProgramOwner::kSystemd], 0u);
}

TEST(DeniedByPrograms, AccessMattersNotJustTheNumber) {
  auto p = program(ProgramOwner::kRuntime, 1, {kDenyAll, allow(DeviceType::kChar, 195, 1, kAccessRead)});
  EXPECT_TRUE(denied_by_programs({p}, {want(kGpu1, kAccessRead)}).empty());
  EXPECT_EQ(denied_by_programs({p}, {want(kGpu1, kAccessReadWrite)}).size(), 1u);
}

TEST(PlanV2Repair, NothingIsReplacedWhileNoProgramDeniesAWantedDevice) {
  auto p = program(ProgramOwner::kRuntime, 7, {kDenyAll, allow(DeviceType::kChar, 195, 0, kAccessReadWrite)});
  auto plan = plan_v2_repair({p, p}, {want(kGpu0)});
  EXPECT_TRUE(plan.replace.empty());
  EXPECT_TRUE(plan.leave.empty());
}

TEST(PlanV2Repair, OnlyDenyingProgramsAreWrappedAndTheWrapperKeepsTheirOtherVerdicts) {
  const std::vector<OciDeviceCgroupRule> narrow{kDenyAll, allow(DeviceType::kChar, 1, 3, kAccessAll)};
  auto runtime = program(ProgramOwner::kRuntime, 7, narrow);
  auto allows_gpu = program(ProgramOwner::kSystemd, 8, {kDenyAll, allow(DeviceType::kChar, 195, 0, kAccessAll)});
  auto plan = plan_v2_repair({runtime, allows_gpu}, {want(kGpu0)});
  ASSERT_EQ(plan.replace.size(), 1u);
  EXPECT_EQ(plan.replace[0].old.id, 7u);
  const BpfCode code = wrap_device_program(plan.replace[0].added, plan.replace[0].old.inner);
  EXPECT_EQ(program_allows(code, kGpu0, kAccessReadWrite), Verdict::kAllow);
  EXPECT_EQ(run_device_program(code, kGpu0, kAccessMknod), Verdict::kDeny) << "wanted rw, not m; the runtime denies m";
  EXPECT_EQ(run_device_program(code, kNull, kAccessReadWrite), Verdict::kAllow);
  EXPECT_EQ(run_device_program(code, {DeviceType::kChar, 1, 9}, kAccessRead), Verdict::kDeny) << "stays narrow";
  EXPECT_EQ(run_device_program(code, kGpu1, kAccessRead), Verdict::kDeny);
}

TEST(PlanV2Repair, ARewrapWrapsTheOriginalWithTheNewWantedSet) {
  const std::vector<OciDeviceCgroupRule> spec{kDenyAll, allow(DeviceType::kChar, 1, 3, kAccessAll)};
  auto original = program(ProgramOwner::kRuntime, 7, spec);
  auto first = plan_v2_repair({original}, {want(kGpu0)});
  ASSERT_EQ(first.replace.size(), 1u);
  AttachedDeviceProgram wrapper;
  wrapper.id = 9;
  wrapper.owner = ProgramOwner::kOurs;
  wrapper.code = wrap_device_program(first.replace[0].added, first.replace[0].old.inner);
  auto unwrapped = unwrap_device_program(wrapper.code);
  ASSERT_TRUE(unwrapped);
  wrapper.wrapper = true;
  wrapper.inner = unwrapped->inner;
  auto second = plan_v2_repair({wrapper}, {want(kGpu1)});
  ASSERT_EQ(second.replace.size(), 1u);
  const BpfCode second_code = wrap_device_program(second.replace[0].added, second.replace[0].old.inner);
  auto again = unwrap_device_program(second_code);
  ASSERT_TRUE(again);
  EXPECT_EQ(again->inner.size(), original.code.size()) << "the original, not the first wrapper";
  EXPECT_FALSE(unwrap_device_program(again->inner)) << "depth 1";
  EXPECT_EQ(run_device_program(second_code, kGpu0, kAccessRead), Verdict::kDeny) << "no longer wanted";
  EXPECT_EQ(run_device_program(second_code, kGpu1, kAccessRead), Verdict::kAllow);
}

TEST(PlanV2Repair, LinkAttachedAndUnwrappableProgramsAreLeftWithTheReason) {
  auto linked = program(ProgramOwner::kRuntime, 7, {kDenyAll});
  linked.link = true;
  auto opaque = program(ProgramOwner::kRuntime, 8, {kDenyAll});
  opaque.inner.clear();
  opaque.unwrappable = "it calls helpers or subprograms (instruction 4)";
  auto plan = plan_v2_repair({linked, opaque}, {want(kGpu0)});
  EXPECT_TRUE(plan.replace.empty());
  ASSERT_EQ(plan.leave.size(), 2u);
  EXPECT_NE(plan.leave[0].reason.find("bpf_link"), std::string::npos);
  EXPECT_NE(plan.leave[1].reason.find("calls helpers"), std::string::npos);
}

// A grant's later round: a denying program loaded after what its first look saw (a higher
// id) was attached during the grant by a writer not yet named, maybe a runtime inside its
// apply: left for its own record, with its twins; the programs the first look could have
// seen are still wrapped.
TEST(PlanV2Repair, ALaterRoundLeavesProgramsLoadedAfterItsFirstLook) {
  const std::vector<OciDeviceCgroupRule> spec{kDenyAll, allow(DeviceType::kChar, 1, 3, kAccessAll)};
  auto systemd = program(ProgramOwner::kSystemd, 7, {kDenyAll, allow(DeviceType::kChar, 1, 5, kAccessAll)});
  auto seen_twin = program(ProgramOwner::kSystemd, 9, {kDenyAll, allow(DeviceType::kChar, 1, 5, kAccessAll)});
  auto runtime = program(ProgramOwner::kRuntime, 12, spec);
  auto runtime_twin = program(ProgramOwner::kRuntime, 14, spec);
  auto late_twin_of_seen = program(ProgramOwner::kSystemd, 15, {kDenyAll, allow(DeviceType::kChar, 1, 5, kAccessAll)});
  V2Plan plan = plan_v2_repair({systemd, seen_twin, runtime, runtime_twin, late_twin_of_seen}, {want(kGpu0)});
  ASSERT_EQ(plan.replace.size(), 2u);
  leave_newcomers(plan, /*newest_seen_first=*/10);
  ASSERT_EQ(plan.replace.size(), 1u) << "the runtime's program, loaded after the first look, is left";
  EXPECT_EQ(plan.replace[0].old.id, 7u);
  ASSERT_EQ(plan.replace[0].twins.size(), 1u) << "a twin loaded later is left too";
  EXPECT_EQ(plan.replace[0].twins[0].id, 9u);
  V2Plan all = plan_v2_repair({systemd, runtime}, {want(kGpu0)});
  leave_newcomers(all, /*newest_seen_first=*/12);
  EXPECT_EQ(all.replace.size(), 2u) << "both seen: both wrapped";
}

// The guessed built-in list is gone from repairs; a config still setting it is told why.
TEST(RemovedBuiltinDevicesKey, IsRefusedWithTheReason) {
  auto c = parse_config("runtime:\n  builtin_devices: runc-1.2\n", "test.yaml");
  ASSERT_FALSE(c.ok());
  EXPECT_NE(c.error().message.find("runtime.builtin_devices: was removed"), std::string::npos) << c.error().message;
  EXPECT_NE(c.error().message.find("test.yaml:2"), std::string::npos) << c.error().message;
}

TEST(ProgramOwner, NamesForLogs) {
  EXPECT_EQ(to_string(ProgramOwner::kOurs), "ours");
  EXPECT_EQ(to_string(ProgramOwner::kSystemd), "systemd");
  EXPECT_EQ(to_string(ProgramOwner::kRuntime), "runtime");
}

// A wrapper of ours around `original` adding `added`, as a query describes it.
AttachedDeviceProgram wrapper_of(const AttachedDeviceProgram& original, const std::vector<WantedDevice>& added,
                                 std::uint32_t id) {
  AttachedDeviceProgram w;
  w.id = id;
  w.owner = ProgramOwner::kOurs;
  w.code = wrap_device_program(added, original.inner);
  auto unwrapped = unwrap_device_program(w.code);
  w.wrapper = true;
  w.added = unwrapped->added;
  w.inner = unwrapped->inner;
  return w;
}

TEST(PlanV2Repair, AProgramAWrapperBesideItRunsIsWrappedAndTheOlderWrapperThenDetached) {
  // systemd on daemon-reload: its previous program was replaced by our wrapper, so it
  // cannot detach that one; it attaches the same program again beside it.
  const std::vector<OciDeviceCgroupRule> spec{kDenyAll, allow(DeviceType::kChar, 1, 3, kAccessAll)};
  auto first = program(ProgramOwner::kSystemd, 7, spec);
  auto ours = wrapper_of(first, {want(kGpu0)}, 9);
  auto again = program(ProgramOwner::kSystemd, 11, spec);
  auto plan = plan_v2_repair({ours, again}, {want(kGpu0)});
  // Not detached: the wrapper beside it may be in a re-applier's list of programs to
  // detach after its attach (runc). It gets a wrapper of its own.
  EXPECT_TRUE(plan.detach.empty());
  ASSERT_EQ(plan.replace.size(), 1u);
  EXPECT_EQ(plan.replace[0].old.id, 11u);

  // Next round: two wrappers with the same instructions and devices. The one attached
  // first goes; the one just attached stays.
  auto fresh = wrapper_of(again, {want(kGpu0)}, 12);
  auto next = plan_v2_repair({ours, fresh}, {want(kGpu0)});
  EXPECT_TRUE(next.replace.empty());
  ASSERT_EQ(next.detach.size(), 1u);
  EXPECT_EQ(next.detach[0].id, 9u);
  // Detaching it takes away no restriction the one staying does not enforce.
  for (const DeviceNumber dev : {kNull, kGpu0, kGpu1, DeviceNumber{DeviceType::kChar, 1, 9}, DeviceNumber{DeviceType::kBlock, 8, 0}})
    for (std::uint8_t access = 1; access <= kAccessAll; ++access)
      EXPECT_EQ(run_device_program(ours.code, dev, access), run_device_program(fresh.code, dev, access));
  EXPECT_TRUE(plan_v2_repair({fresh}, {want(kGpu0)}).detach.empty()) << "one left: stays";
}

TEST(PlanV2Repair, WrappersThatDifferAreNotDuplicatesAndTwoIdenticalDenyingProgramsShareOne) {
  const std::vector<OciDeviceCgroupRule> spec{kDenyAll, allow(DeviceType::kChar, 1, 3, kAccessAll)};
  auto first = program(ProgramOwner::kSystemd, 7, spec);
  auto other = program(ProgramOwner::kSystemd, 8, {kDenyAll, allow(DeviceType::kChar, 1, 5, kAccessAll)});
  auto a = wrapper_of(first, {want(kGpu0)}, 9);
  auto b = wrapper_of(other, {want(kGpu0)}, 10);
  auto c = wrapper_of(first, {want(kGpu0), want(kGpu1, kAccessReadWrite, "nvidia1")}, 11);
  EXPECT_TRUE(plan_v2_repair({a, b}, {want(kGpu0)}).detach.empty()) << "other instructions";
  EXPECT_TRUE(plan_v2_repair({a, c}, {want(kGpu0)}).detach.empty()) << "other devices added";
  // Two denying programs with the same instructions: one wrapper replaces the first, the
  // second is its twin, detached once the wrapper is in (the kernel attaches one program
  // once per cgroup); nothing is detached on its own.
  auto same = program(ProgramOwner::kRuntime, 12, spec);
  auto both = plan_v2_repair({first, same}, {want(kGpu0)});
  ASSERT_EQ(both.replace.size(), 1u);
  EXPECT_EQ(both.replace[0].old.id, 7u);
  ASSERT_EQ(both.replace[0].twins.size(), 1u);
  EXPECT_EQ(both.replace[0].twins[0].id, 12u);
  EXPECT_TRUE(both.detach.empty());
}

}  // namespace
}  // namespace gdw
