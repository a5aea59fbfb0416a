// The daemon's gauges as counted from its container table (service/gauges.h): what
// gpu_devwatch_containers_{watched,missing_devices,throttled,unidentified}, the identity
// problems, the device programs by owner and the unresolved CDI names say.
#include "service/gauges.h"

#include <gtest/gtest.h>

#include <functional>
#include <random>
#include <set>
#include <sstream>

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
  // Pod `pod_uid` holds a GPU (its containers, unidentified, are a problem).
  void hold_devices(const std::string& pod_uid) {
    AllocationEntry e;
    e.pod_uid = pod_uid;
    e.container_name = "main";
    e.resource = "nvidia.com/gpu";
    e.device_ids = {"GPU-1"};
    DesiredPolicy policy;
    policy.resource_globs = {"nvidia.com/gpu"};
    allocations_ = AllocationIndex({e}, policy);
  }

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
  hold_devices("held");
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

// Everything count_gauges() shows, as text.
std::string shown(const GaugeCounts& g) {
  std::ostringstream out;
  out << g.watched << ' ' << g.missing << ' ' << g.throttled << ' ' << g.unidentified << ' ' << g.identity_conflicts
      << ' ' << g.unresolved_cdi << " |";
  for (const auto& [owner, n] : g.programs) out << ' ' << static_cast<int>(owner) << '=' << n;
  out << " |";
  for (const auto& p : g.identity_problems) out << ' ' << p;
  out << " |";
  for (const auto& p : g.problems)
    out << ' ' << p.key << '/' << p.pod.pod_namespace << '/' << p.pod.name << '/' << p.container << '/'
        << static_cast<int>(p.kind);
  return out.str();
}

// The daemon reads a checked container's gauge share again only when its gauge inputs
// moved (ContainerFleet::check): each thing a check can change that the count shows must
// move them, and a revoke-and-repair, which the count does not show, must not.
TEST_F(GaugesTest, WhatACheckChangesThatTheCountShowsMovesTheGaugeInputs) {
  const std::pair<const char*, std::function<void(WatchedContainer&)>> changes[] = {
      {"no longer a GPU container", [](WatchedContainer& w) { w.target.kind = TargetKind::kNotGpu; }},
      {"missing no more", [](WatchedContainer& w) { w.repair.missing.clear(); }},
      {"held back", [](WatchedContainer& w) { w.repair.throttled = true; }},
      {"its bundle agrees again", [](WatchedContainer& w) { w.target.identity_conflict = false; }},
      {"another conflict text", [](WatchedContainer& w) { w.target.problem = "bundle says pod u8"; }},
      {"an unresolved CDI name", [](WatchedContainer& w) { w.target.desired.unresolved_cdi = {"nvidia.com/gpu=9"}; }},
      {"a program more", [](WatchedContainer& w) { ++w.programs[ProgramOwner::kSystemd]; }},
      {"a program's owner", [](WatchedContainer& w) {
         w.programs[ProgramOwner::kRuntime] = 0;
         w.programs[ProgramOwner::kOurs] = 1;
       }},
      {"renamed", [](WatchedContainer& w) { w.labels.pod = "trainer-1"; }},
  };
  for (const auto& [what, change] : changes) {
    table_.clear();
    WatchedContainer& w = add("a", "p1", TargetKind::kGpu);
    w.labels = {"ml", "trainer-0", "main"};
    w.repair.missing.insert(DeviceNumber{DeviceType::kChar, 195, 0});
    w.programs[ProgramOwner::kRuntime] = 1;
    w.target.identity_conflict = true;
    w.target.problem = "bundle says pod u7";
    const auto inputs = w.gauge_inputs();
    const std::string before = shown(count());
    change(w);
    ASSERT_NE(shown(count()), before) << what << ": the case must change what the count shows";
    EXPECT_NE(w.gauge_inputs(), inputs) << what;
  }
  table_.clear();
  WatchedContainer& w = add("a", "p1", TargetKind::kGpu);
  w.programs[ProgramOwner::kOurs] = 1;
  const auto inputs = w.gauge_inputs();
  w.repair.missing.insert(DeviceNumber{DeviceType::kChar, 195, 0});  // revoked ...
  w.repair.missing.clear();                                           // ... and granted back
  EXPECT_EQ(w.gauge_inputs(), inputs);
}

// The daemon keeps the counts container by container (GaugeTally): after a check it reads
// again only the shares of the containers the check moved, so a re-apply costs the same on
// a node of 10 containers as on one of 500. Whatever the containers go through, one at a
// time, the kept counts are the counts of the whole table.
TEST_F(GaugesTest, KeptContainerByContainerTheCountsAreThoseOfTheWholeTable) {
  hold_devices("p1");
  MergedAllocations::Ambiguity a;
  a.name = PodName{"ml", "trainer"};
  a.uids = {"u1", "u2"};
  merged_.ambiguous.push_back(a);

  GaugeTally tally;
  tally.rebuild(table_, allocations_);
  std::mt19937 rng(7);
  auto pick = [&](int n) { return static_cast<int>(rng() % static_cast<unsigned>(n)); };
  const TargetKind kinds[] = {TargetKind::kGpu, TargetKind::kNotGpu, TargetKind::kUnidentified};
  const ProgramOwner owners[] = {ProgramOwner::kOurs, ProgramOwner::kSystemd, ProgramOwner::kRuntime};
  const char* texts[] = {"bundle says pod u7", "bundle says pod u8"};  // shared between containers
  for (int step = 0; step < 3000; ++step) {
    const std::string name = "c" + std::to_string(pick(12));
    const std::string pod = "p" + std::to_string(pick(3));  // p1 holds devices
    const std::string dir = "/kubepods/pod" + pod + "/" + name;
    WatchedContainer* w = table_.find(dir);
    if (w && pick(10) == 0) {  // gone: out of the counts before it leaves the table
      tally.remove(*w);
      table_.erase(dir);
    } else {
      if (!w) w = &add(name, pod, kinds[pick(3)]);  // new: counted at its first update
      switch (pick(8)) {
        case 0: w->target.kind = kinds[pick(3)]; break;
        case 1:
          if (w->repair.missing.empty()) w->repair.missing.insert(DeviceNumber{DeviceType::kChar, 195, 0});
          else w->repair.missing.clear();
          break;
        case 2: w->repair.throttled = !w->repair.throttled; break;
        case 3: w->programs[owners[pick(3)]] = static_cast<std::size_t>(pick(3)); break;
        case 4:
          w->target.identity_conflict = !w->target.identity_conflict;
          w->target.problem = texts[pick(2)];
          break;
        case 5: w->target.desired.unresolved_cdi.assign(static_cast<std::size_t>(pick(3)), "nvidia.com/gpu=9"); break;
        case 6: w->labels = {"ml", "trainer-" + std::to_string(pick(2)), "main"}; break;
        default: break;  // a check that moved nothing
      }
      tally.update(*w, allocations_);
    }
    ASSERT_EQ(shown(tally.counts(merged_)), shown(count())) << "step " << step << ", " << dir;
  }
  EXPECT_GT(table_.size(), 0u);
}

// A container's share taken out leaves nothing of it in the counts, the problem it had
// included; taking it out twice changes nothing.
TEST_F(GaugesTest, AContainerTakenOutOfTheTallyLeavesNothingBehind) {
  GaugeTally tally;
  tally.rebuild(table_, allocations_);
  WatchedContainer& w = add("a", "p1", TargetKind::kGpu);
  w.repair.missing.insert(DeviceNumber{DeviceType::kChar, 195, 0});
  w.programs[ProgramOwner::kOurs] = 1;
  tally.update(w, allocations_);
  EXPECT_EQ(tally.counts(merged_).watched, 1u);
  EXPECT_EQ(tally.counts(merged_).missing, 1u);
  ASSERT_EQ(tally.counts(merged_).problems.size(), 1u);
  tally.remove(w);
  tally.remove(w);
  table_.erase("/kubepods/podp1/a");
  EXPECT_EQ(shown(tally.counts(merged_)), shown(count()));
  EXPECT_EQ(tally.counts(merged_).watched, 0u);
  EXPECT_TRUE(tally.counts(merged_).programs.empty());
  EXPECT_TRUE(tally.counts(merged_).problems.empty());
}

}  // namespace
}  // namespace gdw
