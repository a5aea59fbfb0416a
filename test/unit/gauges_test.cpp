// The daemon's gauges as counted from its container table (service/gauges.h): what
// gpu_devwatch_containers_{watched,missing_devices,throttled,unidentified}, the identity
// problems, the device programs by owner and the unresolved CDI names say.
#include "service/gauges.h"

#include <gtest/gtest.h>

#include <set>

#include "core/config.h"

namespace gdw {
namespace {

class GaugesTest : public ::testing::Test {
 protected:
  WatchedContainer& add(const std::string& name, const std::string& pod_uid, TargetKind kind) {
    DiscoveredContainer cg;
    cg.cgroup_dir = "/kubepods/pod" + pod_uid + "/" + name;
    cg.pod.pod_uid = pod_uid;
    WatchedContainer& w = table_.upsert(cg, config_).first;
    w.target.kind = kind;
    return w;
  }
  GaugeCounts count() const { return count_gauges(table_, merged_, allocations_); }

  Config config_;
  ContainerTable table_;
  MergedAllocations merged_;
  AllocationIndex allocations_;
};

TEST_F(GaugesTest, AnEmptyNodeCountsNothing) {
  GaugeCounts g = count();
  EXPECT_EQ(g.watched, 0u);
  EXPECT_EQ(g.missing, 0u);
  EXPECT_TRUE(g.identity_problems.empty());
}

TEST_F(GaugesTest, GpuContainersByStateAndTheirProgramsAndCdiNames) {
  add("a", "p1", TargetKind::kGpu);
  WatchedContainer& missing = add("b", "p2", TargetKind::kGpu);
  missing.repair.missing.insert(DeviceNumber{DeviceType::kChar, 195, 0});
  missing.programs[ProgramOwner::kSystemd] = 2;
  missing.target.desired.unresolved_cdi = {"nvidia.com/gpu=9"};
  WatchedContainer& held = add("c", "p3", TargetKind::kGpu);
  held.repair.throttled = true;
  held.repair.missing.insert(DeviceNumber{DeviceType::kChar, 195, 1});
  held.programs[ProgramOwner::kSystemd] = 1;
  held.programs[ProgramOwner::kOurs] = 1;
  WatchedContainer& other = add("d", "p4", TargetKind::kNotGpu);
  other.repair.missing.insert(DeviceNumber{DeviceType::kChar, 195, 2});  // not ours to count
  other.programs[ProgramOwner::kRuntime] = 5;

  GaugeCounts g = count();
  EXPECT_EQ(g.watched, 3u);
  EXPECT_EQ(g.missing, 2u);
  EXPECT_EQ(g.throttled, 1u);
  EXPECT_EQ(g.unresolved_cdi, 1u);
  EXPECT_EQ(g.programs[ProgramOwner::kSystemd], 3u);
  EXPECT_EQ(g.programs[ProgramOwner::kOurs], 1u);
  EXPECT_EQ(g.programs.count(ProgramOwner::kRuntime), 0u) << "only GPU containers' programs";
  // The node conditions' input: the two GPU containers missing devices, keyed by cgroup.
  ASSERT_EQ(g.problems.size(), 2u);
  std::set<std::string> keys;
  for (const auto& p : g.problems) {
    keys.insert(p.key);
    EXPECT_EQ(p.kind, kube::ContainerProblem::Kind::kMissingDevices);
  }
  EXPECT_EQ(keys, (std::set<std::string>{"/kubepods/podp2/b", "/kubepods/podp3/c"}));
}

TEST_F(GaugesTest, UnidentifiedCountsOnlyInPodsHoldingDevices) {
  AllocationEntry e;
  e.pod_uid = "held";
  e.container_name = "main";
  e.resource = "nvidia.com/gpu";
  e.device_ids = {"GPU-1"};
  DesiredPolicy policy;
  policy.resource_globs = {"nvidia.com/gpu"};
  allocations_ = AllocationIndex({e}, policy);
  add("x", "held", TargetKind::kUnidentified);
  add("y", "free", TargetKind::kUnidentified);
  GaugeCounts g = count();
  EXPECT_EQ(g.unidentified, 1u);
  ASSERT_EQ(g.problems.size(), 1u) << "a container of a pod holding devices, unidentified: a problem";
  EXPECT_EQ(g.problems[0].key, "/kubepods/podheld/x");
  EXPECT_EQ(g.problems[0].pod.uid, "held");
  EXPECT_EQ(g.problems[0].kind, kube::ContainerProblem::Kind::kUnidentified);
}

TEST_F(GaugesTest, IdentityProblemsAreAmbiguousNamesAndConflictsOnce) {
  MergedAllocations::Ambiguity a;
  a.name = PodName{"ml", "trainer"};
  a.uids = {"u1", "u2"};
  merged_.ambiguous.push_back(a);
  WatchedContainer& w = add("z", "p9", TargetKind::kUnidentified);
  w.target.identity_conflict = true;
  w.target.problem = "bundle says pod u7, cgroup says p9";
  WatchedContainer& v = add("z2", "p9", TargetKind::kUnidentified);
  v.target.identity_conflict = true;
  v.target.problem = "bundle says pod u7, cgroup says p9";

  GaugeCounts g = count();
  EXPECT_EQ(g.identity_conflicts, 2u);
  ASSERT_EQ(g.identity_problems.size(), 2u) << "the same text once";
  EXPECT_TRUE(g.identity_problems.count(describe(a)));
  EXPECT_TRUE(g.identity_problems.count("bundle says pod u7, cgroup says p9"));
}

}  // namespace
}  // namespace gdw
