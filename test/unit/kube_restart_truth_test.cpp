// What the node conditions and the readiness gate say across a restart and at a pod's
// start, decided in memory: nothing before the node is read and every container checked,
// "Unknown" only where the node has no condition yet, a "True" condition and a "False"
// gate carried over (grace from lastTransitionTime), and a gate that is "True" only for a
// pod whose containers all started and were checked.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "kube/node_prior.h"
#include "kube/status_planner.h"

namespace gdw::kube {
namespace {

using json = nlohmann::json;
using namespace std::chrono_literals;

const Clock::time_point T0 = Clock::time_point{} + std::chrono::hours(1000);
const WallClock::time_point W0 = WallClock::time_point{} + std::chrono::seconds(1'800'000'000);

std::string uid(int i) { return "00000000-0000-4000-8000-00000000000" + std::to_string(i % 10); }

ContainerProblem missing(int pod, ContainerProblem::Kind kind = ContainerProblem::Kind::kMissingDevices) {
  return {"/kubepods/pod" + uid(pod) + "/c", {"ml", "trainer-" + std::to_string(pod), uid(pod)}, "trainer", kind};
}

DeviceAccessState checked(std::vector<ContainerProblem> problems) { return {std::move(problems), false, {}, true}; }

StatusOptions options() {
  StatusOptions o;
  o.node_path = "/api/v1/nodes/n1/status";
  o.grace = 10s;
  o.jitter = 0;  // back-offs exact
  return o;
}

PriorCondition prior(const std::string& status, WallClock::time_point since) { return {status, "R", "m", since}; }

// The API server's node after a previous run: Degraded as given, the other two "False".
PriorConditions node_with_degraded(const std::string& status, WallClock::time_point since) {
  return {prior(status, since), prior("False", since - 3600s), prior("False", since - 3600s)};
}

StatusPlanner after_read(const PriorConditions& p) {
  StatusPlanner planner(options());
  auto read = planner.plan(T0 - 2s, W0 - 2s);
  EXPECT_EQ(read.size(), 1u);
  EXPECT_TRUE(read.at(0).read);
  planner.node_read(p, T0 - 2s);
  return planner;
}

json conditions_of(const PlannedWrite& w) { return json::parse(w.body)["status"]["conditions"]; }

std::vector<PlannedWrite> pods_of(const std::vector<PlannedWrite>& w) {
  std::vector<PlannedWrite> out;
  for (const auto& x : w)
    if (!x.node) out.push_back(x);
  return out;
}

GatedPod gated(int i, std::optional<bool> observed, bool started = true) {
  return {{"ml", "trainer-" + std::to_string(i), uid(i)}, observed, started};
}

TEST(KubeRestartTruth, ARestartWithDegradedTrueKeepsItTrueFromItsTransitionTime) {
  const auto since = W0 - 600s;
  StatusPlanner p = after_read(node_with_degraded("True", since));
  EXPECT_TRUE(p.plan(T0, W0).empty()) << "nothing before the first check";
  p.observe({{missing(1)}, false, {}, /*checked=*/false}, T0);
  EXPECT_TRUE(p.plan(T0, W0).empty()) << "a count before the check is no verdict";
  p.observe(checked({missing(1)}), T0);
  auto w = p.plan(T0, W0);
  ASSERT_EQ(w.size(), 1u);
  auto c = conditions_of(w[0]);
  EXPECT_EQ(c[0]["status"], "True") << "still missing: no flap to False within a new grace";
  EXPECT_EQ(c[0]["lastTransitionTime"], rfc3339(since));
  EXPECT_EQ(c[1]["status"], "False");
  EXPECT_EQ(c[1]["lastTransitionTime"], rfc3339(since - 3600s));
}

TEST(KubeRestartTruth, ARestartWithDegradedTrueIsClearedOnlyByACheck) {
  StatusPlanner p = after_read(node_with_degraded("True", W0 - 600s));
  EXPECT_FALSE(p.next_wake(T0 + 60s)) << "nothing to do, however long the check takes";
  p.observe(checked({}), T0 + 60s);
  auto w = p.plan(T0 + 60s, W0 + 60s);
  ASSERT_EQ(w.size(), 1u);
  EXPECT_EQ(conditions_of(w[0])[0]["status"], "False");
  EXPECT_EQ(conditions_of(w[0])[0]["lastTransitionTime"], rfc3339(W0 + 60s));
}

TEST(KubeRestartTruth, AFirstStartWritesUnknownUntilTheFirstCheck) {
  StatusPlanner p = after_read({});
  auto unknown = p.plan(T0, W0);
  ASSERT_EQ(unknown.size(), 1u);
  auto c = conditions_of(unknown[0]);
  ASSERT_EQ(c.size(), 3u);
  for (const auto& x : c) {
    EXPECT_EQ(x["status"], "Unknown");
    EXPECT_EQ(x["reason"], "NotYetChecked");
  }
  p.written(unknown[0], true, T0);
  EXPECT_TRUE(p.plan(T0 + 5s, W0 + 5s).empty()) << "said once";
  p.observe(checked({}), T0 + 5s);
  auto verdict = p.plan(T0 + 5s, W0 + 5s);
  ASSERT_EQ(verdict.size(), 1u);
  for (const auto& x : conditions_of(verdict[0])) {
    EXPECT_EQ(x["status"], "False");
    EXPECT_EQ(x["lastTransitionTime"], rfc3339(W0 + 5s));
  }
}

TEST(KubeRestartTruth, OnlyTheConditionsTheNodeLacksAreWrittenUnknown) {
  PriorConditions some = node_with_degraded("True", W0 - 60s);
  some[2].reset();
  StatusPlanner p = after_read(some);
  auto w = p.plan(T0, W0);
  ASSERT_EQ(w.size(), 1u);
  auto c = conditions_of(w[0]);
  ASSERT_EQ(c.size(), 1u) << "the True one is left as it is";
  EXPECT_EQ(c[0]["type"], "GPUDevicePluginUnresponsive");
}

TEST(KubeRestartTruth, NothingIsWrittenBeforeTheNodeIsRead) {
  StatusPlanner p(options());
  p.observe(checked({}), T0);
  auto read = p.plan(T0, W0);
  ASSERT_EQ(read.size(), 1u);
  EXPECT_TRUE(read[0].read);
  p.written(read[0], false, T0);  // the API server is down
  EXPECT_TRUE(p.plan(T0 + 500ms, W0).empty());
  EXPECT_EQ(p.next_wake(T0 + 500ms), T0 + 1s) << "read again after the back-off";
  auto again = p.plan(T0 + 1s, W0);
  ASSERT_EQ(again.size(), 1u);
  ASSERT_TRUE(again[0].read);
  p.node_read(node_with_degraded("False", W0 - 60s), T0 + 1s);
  auto w = p.plan(T0 + 1s, W0);
  ASSERT_EQ(w.size(), 1u);
  EXPECT_FALSE(w[0].read);
  EXPECT_EQ(conditions_of(w[0])[0]["lastTransitionTime"], rfc3339(W0 - 60s)) << "False before, False now";
}

TEST(KubeRestartTruth, AGateFalseAtARestartStaysFalseUntilACheckClearsIt) {
  StatusPlanner p = after_read(node_with_degraded("False", W0 - 60s));
  p.set_gated_pods({gated(1, false), gated(2, true)}, T0 - 1s);
  p.observe(checked({missing(1), missing(2)}), T0);
  auto w = p.plan(T0, W0);
  EXPECT_TRUE(pods_of(w).empty()) << "pod 1 stays False; pod 2, True before, is within its grace";
  EXPECT_EQ(conditions_of(w.at(0))[0]["status"], "True") << "pod 1's miss, carried by its gate, counts for the node";
  p.written(w[0], true, T0);
  p.set_gated_pods({gated(1, false), gated(2, true)}, T0 + 5s);
  EXPECT_TRUE(pods_of(p.plan(T0 + 5s, W0 + 5s)).empty());
  auto later = pods_of(p.plan(T0 + 10s, W0 + 10s));
  ASSERT_EQ(later.size(), 1u);
  EXPECT_EQ(later[0].pod_uid, uid(2));
  EXPECT_FALSE(later[0].status);
  p.written(later[0], true, T0 + 10s);
  p.observe(checked({missing(2)}), T0 + 11s);  // pod 1 repaired
  auto cleared = pods_of(p.plan(T0 + 11s, W0 + 11s));
  ASSERT_EQ(cleared.size(), 1u);
  EXPECT_EQ(cleared[0].pod_uid, uid(1));
  EXPECT_TRUE(cleared[0].status);
}

TEST(KubeRestartTruth, APendingPodIsNeverTrue) {
  StatusPlanner p = after_read(node_with_degraded("False", W0 - 60s));
  p.set_gated_pods({gated(1, std::nullopt, /*started=*/false), gated(2, true, /*started=*/false)}, T0 - 1s);
  p.observe(checked({}), T0);
  auto w = pods_of(p.plan(T0 + 30s, W0 + 30s));
  ASSERT_EQ(w.size(), 1u) << "pod 1 (no gate yet) is left unready as it is";
  EXPECT_EQ(w[0].pod_uid, uid(2));
  EXPECT_FALSE(w[0].status) << "a True over a pod not started is taken back";
  EXPECT_EQ(json::parse(w[0].body)["status"]["conditions"][0]["reason"], "ContainersNotStarted");
}

TEST(KubeRestartTruth, TheGateWaitsForACheckAfterTheContainersStarted) {
  StatusPlanner p = after_read(node_with_degraded("False", W0 - 60s));
  p.observe(checked({}), T0);
  p.set_gated_pods({gated(1, std::nullopt, false)}, T0 + 1s);
  EXPECT_TRUE(pods_of(p.plan(T0 + 1s, W0)).empty());
  p.set_gated_pods({gated(1, std::nullopt, true)}, T0 + 2s);  // kubelet: every container started
  EXPECT_TRUE(pods_of(p.plan(T0 + 2s, W0)).empty()) << "the last check is older than the start";
  EXPECT_TRUE(p.take_wanted_check()) << "a recount is asked for";
  EXPECT_FALSE(p.take_wanted_check());
  p.observe(checked({}), T0 + 3s);
  auto w = pods_of(p.plan(T0 + 3s, W0));
  ASSERT_EQ(w.size(), 1u);
  EXPECT_TRUE(w[0].status);
}

TEST(KubeRestartTruth, AnUnidentifiedContainerKeepsTheGateFromTrue) {
  StatusPlanner p = after_read(node_with_degraded("False", W0 - 60s));
  p.set_gated_pods({gated(1, std::nullopt)}, T0 - 1s);
  p.observe(checked({missing(1, ContainerProblem::Kind::kUnidentified)}), T0);
  EXPECT_TRUE(pods_of(p.plan(T0 + 1s, W0)).empty()) << "not checkable: not True";
  auto w = pods_of(p.plan(T0 + 10s, W0 + 10s));
  ASSERT_EQ(w.size(), 1u) << "past the grace: False, written";
  EXPECT_FALSE(w[0].status);
}

TEST(KubeNodePrior, ReadsOurConditionsFromTheNode) {
  const std::string node = R"x({"kind":"Node","metadata":{"name":"n1"},"status":{"conditions":[
    {"type":"Ready","status":"True"},
    {"type":"GPUDeviceAccessDegraded","status":"True","reason":"ContainersMissingDevices","message":"1 pod(s)",
     "lastTransitionTime":"2027-01-15T08:00:00Z"},
    {"type":"GPUAllocationRecordStale","status":"Unknown","reason":"NotYetChecked"}]}})x";
  auto p = parse_node_conditions(node);
  ASSERT_TRUE(p.ok());
  ASSERT_TRUE((*p)[0]);
  EXPECT_EQ((*p)[0]->status, "True");
  EXPECT_EQ(rfc3339(*(*p)[0]->last_transition), "2027-01-15T08:00:00Z");
  ASSERT_TRUE((*p)[1]);
  EXPECT_EQ((*p)[1]->status, "Unknown");
  EXPECT_FALSE(prior_state((*p)[1])) << "Unknown carries nothing";
  EXPECT_FALSE((*p)[2]) << "absent";
  EXPECT_FALSE(parse_node_conditions(R"({"kind":"Pod"})").ok());
  EXPECT_FALSE(parse_node_conditions("not json").ok());
}

TEST(KubeNodePrior, Rfc3339) {
  EXPECT_EQ(rfc3339(*parse_rfc3339("2027-01-15T08:00:00.123456Z")), "2027-01-15T08:00:00Z");
  EXPECT_EQ(rfc3339(*parse_rfc3339("2027-01-15T09:30:00+01:30")), "2027-01-15T08:00:00Z");
  EXPECT_FALSE(parse_rfc3339("2027-01-15 08:00:00Z"));
  EXPECT_FALSE(parse_rfc3339("2027-13-15T08:00:00Z"));
  EXPECT_FALSE(parse_rfc3339(""));
}

}  // namespace
}  // namespace gdw::kube
