// Node conditions and the pod readiness gate, decided in memory: what each condition says,
// the grace, lastTransitionTime kept on a re-assert, what is written when, back-off, and
// that only gated pods are ever written.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "kube/conditions.h"
#include "kube/node_prior.h"
#include "kube/status_planner.h"

namespace gdw::kube {
namespace {

using json = nlohmann::json;
using namespace std::chrono_literals;

const Clock::time_point T0 = Clock::time_point{} + std::chrono::hours(1000);
const WallClock::time_point W0 = WallClock::time_point{} + std::chrono::seconds(1'800'000'000);

std::string uid(int i) { return "00000000-0000-4000-8000-" + std::string(11, '0') + std::to_string(i % 10); }

ContainerProblem missing(int pod, const std::string& container = "trainer") {
  return {"/kubepods/pod" + uid(pod) + "/" + container, {"ml", "trainer-" + std::to_string(pod), uid(pod)}, container,
          ContainerProblem::Kind::kMissingDevices};
}

DeviceAccessState with(std::vector<ContainerProblem> problems, bool stale = false,
                       std::vector<std::string> plugins = {}) {
  return {std::move(problems), stale, std::move(plugins), /*checked=*/true};
}

TEST(KubeConditions, HealthyNodeIsFalseWithTheOkReasons) {
  ProblemClock clock;
  clock.observe(with({}), T0);
  auto c = judge_node(clock, T0, 10s);
  EXPECT_FALSE(c[0].status);
  EXPECT_EQ(c[0].reason, "GPUDeviceAccessOK");
  EXPECT_FALSE(c[1].status);
  EXPECT_EQ(c[1].reason, "CheckpointFresh");
  EXPECT_FALSE(c[2].status);
  EXPECT_EQ(c[2].reason, "DevicePluginsResponsive");
}

TEST(KubeConditions, AContainerMissingDevicesCountsOnlyAfterTheGrace) {
  ProblemClock clock;
  clock.observe(with({missing(1)}), T0);
  clock.observe(with({missing(1)}), T0 + 5s);  // a later snapshot keeps the first sighting
  EXPECT_FALSE(judge_node(clock, T0 + 9s, 10s)[0].status);
  EXPECT_EQ(clock.next_expiry(T0 + 9s, 10s), T0 + 10s);
  auto c = judge_node(clock, T0 + 10s, 10s);
  EXPECT_TRUE(c[0].status);
  EXPECT_EQ(c[0].reason, "ContainersMissingDevices");
  EXPECT_EQ(c[0].message,
            "1 container(s) in 1 pod(s) without their allocated GPU devices for more than 10s (the pods' own Events "
            "name them)");
  // Repaired: gone from the snapshot, and its clock with it.
  clock.observe(with({}), T0 + 11s);
  EXPECT_FALSE(judge_node(clock, T0 + 11s, 10s)[0].status);
  clock.observe(with({missing(1)}), T0 + 12s);
  EXPECT_FALSE(judge_node(clock, T0 + 13s, 10s)[0].status) << "a new miss starts a new grace";
}

TEST(KubeConditions, TheMessageCountsAndNamesNoTenant) {
  ProblemClock clock;
  std::vector<ContainerProblem> problems;
  for (int i = 0; i < 7; ++i) problems.push_back(missing(i));
  problems.push_back(missing(0, "sidecar"));  // a second container of pod 0: one pod
  problems.push_back({"/kubepods/podx/c", {"", "", uid(9)}, "", ContainerProblem::Kind::kUnidentified});
  clock.observe(with(problems), T0);
  auto c = judge_node(clock, T0 + 10s, 10s);
  EXPECT_TRUE(c[0].status);
  EXPECT_EQ(c[0].message,
            "9 container(s) in 8 pod(s) without their allocated GPU devices for more than 10s (the pods' own Events "
            "name them)");
  EXPECT_EQ(c[0].message.find("ml/"), std::string::npos) << "anyone who reads nodes reads it";
  EXPECT_EQ(c[0].message.find("trainer"), std::string::npos);
}

TEST(KubeConditions, StaleCheckpointAndHungPlugins) {
  ProblemClock clock;
  clock.observe(with({}, true, {"nvidia-gpu.sock", "hung.sock", "hung.sock"}), T0);
  auto c = judge_node(clock, T0, 10s);
  EXPECT_TRUE(c[1].status);
  EXPECT_EQ(c[1].reason, "CheckpointStale");
  EXPECT_TRUE(c[2].status);
  EXPECT_EQ(c[2].reason, "DevicePluginHung");
  EXPECT_NE(c[2].message.find(": hung.sock, nvidia-gpu.sock ("), std::string::npos) << c[2].message;
  EXPECT_FALSE(c[0].status);
}

TEST(KubeConditions, TheGateOfAPod) {
  ProblemClock clock;
  clock.observe(with({missing(1), missing(2)}), T0);
  EXPECT_TRUE(gate_ready(clock, uid(1), T0 + 5s, 10s)) << "within the grace";
  EXPECT_FALSE(gate_ready(clock, uid(1), T0 + 10s, 10s));
  EXPECT_TRUE(gate_ready(clock, uid(3), T0 + 10s, 10s)) << "another pod";
  auto g = gate_condition(clock, uid(1), false, T0 + 10s, 10s);
  EXPECT_FALSE(g.status);
  EXPECT_EQ(g.reason, "GPUDevicesMissing");
  EXPECT_EQ(g.message, "Container(s) without their allocated GPU devices for more than 10s: trainer");
  EXPECT_TRUE(gate_condition(clock, uid(3), true, T0, 10s).status);
}

TEST(KubeConditions, TransitionTimeMovesOnlyWithTheStatus) {
  ConditionState before{true, "A", "a", W0};
  EXPECT_EQ(with_transition({true, "A", "other text", {}}, before, W0 + 60s).last_transition, W0);
  EXPECT_EQ(with_transition({false, "B", "b", {}}, before, W0 + 60s).last_transition, W0 + 60s);
  EXPECT_EQ(with_transition({false, "B", "b", {}}, std::nullopt, W0 + 5s).last_transition, W0 + 5s);
}

TEST(KubeConditions, PatchBodies) {
  NodeConditions c{ConditionState{true, "ContainersMissingDevices", "m", W0}, ConditionState{false, "CheckpointFresh", "f", W0},
                   ConditionState{false, "DevicePluginsResponsive", "r", W0}};
  auto node = json::parse(node_status_patch(c, W0 + 30s));
  ASSERT_EQ(node["status"]["conditions"].size(), 3u);
  auto first = node["status"]["conditions"][0];
  EXPECT_EQ(first["type"], "GPUDeviceAccessDegraded");
  EXPECT_EQ(first["status"], "True");
  EXPECT_EQ(first["reason"], "ContainersMissingDevices");
  EXPECT_EQ(first["lastTransitionTime"], rfc3339(W0));
  EXPECT_EQ(first["lastHeartbeatTime"], rfc3339(W0 + 30s));
  EXPECT_EQ(node["status"]["conditions"][1]["type"], "GPUAllocationRecordStale");
  EXPECT_EQ(node["status"]["conditions"][2]["type"], "GPUDevicePluginUnresponsive");
  EXPECT_EQ(node.size(), 1u) << "status only";
  EXPECT_EQ(node_status_path("gpu-node-1"), "/api/v1/nodes/gpu-node-1/status");
  EXPECT_EQ(node_status_path("../x"), "") << "not a node name: no path";

  PodRef pod{"ml", "trainer-0", uid(1)};
  auto p = json::parse(pod_status_patch(pod, {false, "GPUDevicesMissing", "x", W0}, W0));
  EXPECT_EQ(p["metadata"]["uid"], uid(1)) << "refused for another pod of the same name";
  EXPECT_EQ(p["status"]["conditions"][0]["type"], "gpu-devwatch.io/devices-ready");
  EXPECT_EQ(p["status"]["conditions"][0]["status"], "False");
  EXPECT_EQ(pod_status_path(pod), "/api/v1/namespaces/ml/pods/trainer-0/status");
}

// --- The planner ------------------------------------------------------------------------

StatusOptions options() {
  StatusOptions o;
  o.node_path = "/api/v1/nodes/n1/status";
  o.grace = 10s;
  o.jitter = 0;  // back-offs exact
  o.resync = 300s;
  return o;
}

std::vector<PlannedWrite> node_writes(const std::vector<PlannedWrite>& w) {
  std::vector<PlannedWrite> out;
  for (const auto& x : w)
    if (x.node) out.push_back(x);
  return out;
}

std::vector<PlannedWrite> pod_writes(const std::vector<PlannedWrite>& w) {
  std::vector<PlannedWrite> out;
  for (const auto& x : w)
    if (!x.node) out.push_back(x);
  return out;
}

json conditions_of(const PlannedWrite& w) { return json::parse(w.body)["status"]["conditions"]; }

PriorConditions prior_all(const std::string& status, WallClock::time_point since = W0 - 3600s) {
  PriorConditions prior;
  for (auto& p : prior) p = PriorCondition{status, "R", "m", since};
  return prior;
}

// A planner whose read of the node is done: it found our three conditions as `prior`.
StatusPlanner read_node(StatusOptions o = options(), PriorConditions prior = prior_all("False")) {
  StatusPlanner p(std::move(o));
  auto read = p.plan(T0 - 1s, W0 - 1s);
  EXPECT_EQ(read.size(), 1u);
  EXPECT_TRUE(read.at(0).read);
  EXPECT_EQ(read.at(0).path, "/api/v1/nodes/n1?resourceVersion=0");
  p.node_read(prior, T0 - 1s);
  return p;
}

GatedPod gated(int i, std::optional<bool> observed = std::nullopt, bool started = true) {
  return {{"ml", "trainer-" + std::to_string(i), uid(i)}, observed, started};
}

TEST(KubeStatusPlanner, NothingBeforeTheFirstSnapshotThenAllThreeConditions) {
  StatusPlanner p = read_node();
  EXPECT_TRUE(p.plan(T0, W0).empty()) << "the node has the conditions: nothing until the first check";
  EXPECT_FALSE(p.next_wake(T0));
  p.observe({{}, false, {}, /*checked=*/false}, T0);
  EXPECT_TRUE(p.plan(T0, W0).empty()) << "a snapshot before the whole check is no verdict";
  p.observe(with({}), T0);
  auto w = p.plan(T0, W0);
  ASSERT_EQ(w.size(), 1u);
  EXPECT_EQ(w[0].path, "/api/v1/nodes/n1/status");
  for (const auto& c : conditions_of(w[0])) EXPECT_EQ(c["status"], "False") << c.dump();
  EXPECT_TRUE(p.plan(T0 + 2s, W0 + 2s).empty()) << "one node write in flight";
  p.written(w[0], true, T0 + 1s);
  EXPECT_TRUE(p.plan(T0 + 2s, W0 + 2s).empty()) << "delivered and unchanged";
  EXPECT_EQ(p.next_wake(T0 + 2s), T0 + 1s + 300s) << "the resync";
}

TEST(KubeStatusPlanner, AReassertKeepsLastTransitionTime) {
  StatusPlanner p = read_node();
  p.observe(with({}), T0);
  auto first = p.plan(T0, W0);
  p.written(first[0], true, T0);
  auto again = p.plan(T0 + 300s, W0 + 300s);
  ASSERT_EQ(again.size(), 1u) << "resync due";
  for (std::size_t i = 0; i < 3; ++i) {
    EXPECT_EQ(conditions_of(first[0])[i]["lastTransitionTime"], rfc3339(W0 - 3600s)) << "False as read: kept";
    EXPECT_EQ(conditions_of(again[0])[i]["lastTransitionTime"], rfc3339(W0 - 3600s));
    EXPECT_EQ(conditions_of(again[0])[i]["lastHeartbeatTime"], rfc3339(W0 + 300s));
  }
}

TEST(KubeStatusPlanner, AChangeIsWrittenAndOnlyItsTransitionMoves) {
  StatusPlanner p = read_node(options(), prior_all("False", W0));
  p.observe(with({}), T0);
  p.written(p.plan(T0, W0)[0], true, T0);
  p.observe(with({missing(1)}), T0 + 5s);
  EXPECT_TRUE(p.plan(T0 + 5s, W0 + 5s).empty()) << "within the grace";
  EXPECT_EQ(p.next_wake(T0 + 5s), T0 + 15s);
  auto w = p.plan(T0 + 15s, W0 + 15s);
  ASSERT_EQ(w.size(), 1u);
  auto c = conditions_of(w[0]);
  EXPECT_EQ(c[0]["status"], "True");
  EXPECT_EQ(c[0]["lastTransitionTime"], rfc3339(W0 + 15s));
  EXPECT_EQ(c[1]["lastTransitionTime"], rfc3339(W0));
  p.written(w[0], true, T0 + 15s);
  // The message changes (a second pod), the status does not: written, transition kept.
  p.observe(with({missing(1), missing(2)}), T0 + 16s);
  auto more = p.plan(T0 + 26s, W0 + 26s);
  ASSERT_EQ(more.size(), 1u);
  EXPECT_EQ(conditions_of(more[0])[0]["lastTransitionTime"], rfc3339(W0 + 15s));
  EXPECT_NE(conditions_of(more[0])[0]["message"].get<std::string>().find("2 pod(s)"), std::string::npos);
}

TEST(KubeStatusPlanner, FailedWritesBackOffAndWritesAreSpaced) {
  StatusPlanner p = read_node();
  p.observe(with({}), T0);
  Clock::time_point t = T0;
  for (auto backoff : {1s, 2s, 4s, 8s}) {
    auto w = node_writes(p.plan(t, W0));
    ASSERT_EQ(w.size(), 1u);
    p.written(w[0], false, t);
    EXPECT_TRUE(p.plan(t + backoff - 1ms, W0).empty());
    EXPECT_EQ(p.next_wake(t + 1ms), t + backoff);
    t += backoff;
  }
  auto w = p.plan(t, W0);
  p.written(w[0], true, t);
  p.observe(with({}, true), t + 100ms);  // changed at once: waits out the spacing
  EXPECT_TRUE(p.plan(t + 100ms, W0).empty());
  EXPECT_EQ(p.next_wake(t + 100ms), t + 1s);
  EXPECT_EQ(p.plan(t + 1s, W0).size(), 1u);
}

TEST(KubeStatusPlanner, WritesInFlightWhenTheWorkerWentArePlannedAgain) {
  StatusPlanner p = read_node();
  p.set_gated_pods({gated(1)}, T0 - 1s);
  p.observe(with({}), T0);
  ASSERT_EQ(p.plan(T0, W0).size(), 2u);
  EXPECT_TRUE(p.plan(T0 + 5s, W0).empty()) << "both in flight";
  p.abandon_in_flight();  // SIGHUP: the old worker was joined without their outcomes
  EXPECT_EQ(p.plan(T0 + 5s, W0).size(), 2u);
}

TEST(KubeStatusPlanner, NoNodeNameNoNodeWrites) {
  StatusOptions o = options();
  o.node_path = "";
  StatusPlanner p(o);
  p.observe(with({missing(1)}, true), T0);
  EXPECT_TRUE(node_writes(p.plan(T0 + 20s, W0)).empty());
}

TEST(KubeStatusPlanner, OnlyGatedPodsAreWrittenTrueThenFalseThenTrue) {
  StatusPlanner p = read_node();
  p.set_gated_pods({gated(1)}, T0 - 1s);
  p.observe(with({}), T0);
  auto w = p.plan(T0, W0);
  ASSERT_EQ(w.size(), 2u);
  const PlannedWrite pod = w[1];
  EXPECT_FALSE(pod.node);
  EXPECT_EQ(pod.path, "/api/v1/namespaces/ml/pods/trainer-1/status");
  EXPECT_TRUE(pod.status);
  p.written(w[0], true, T0);
  p.written(pod, true, T0);
  EXPECT_TRUE(p.plan(T0 + 2s, W0).empty()) << "delivered";
  // Pod 2 misses devices but declares no gate: only pod 1 is ever written.
  p.observe(with({missing(1), missing(2)}), T0 + 2s);
  auto later = p.plan(T0 + 12s, W0 + 12s);
  ASSERT_EQ(later.size(), 2u);
  EXPECT_FALSE(later[1].node);
  EXPECT_EQ(later[1].pod_uid, uid(1));
  EXPECT_FALSE(later[1].status);
  EXPECT_EQ(json::parse(later[1].body)["status"]["conditions"][0]["reason"], "GPUDevicesMissing");
  p.written(later[0], true, T0 + 12s);
  p.written(later[1], true, T0 + 12s);
  p.observe(with({missing(2)}), T0 + 13s);  // pod 1 repaired: True at once (after the spacing)
  auto repaired = pod_writes(p.plan(T0 + 13s, W0 + 13s));
  ASSERT_EQ(repaired.size(), 1u);
  EXPECT_EQ(repaired[0].pod_uid, uid(1));
  EXPECT_TRUE(repaired[0].status);
  for (const auto& x : repaired) EXPECT_NE(x.pod_uid, uid(2));
}

TEST(KubeStatusPlanner, WhatTheWatchShowsDecidesWhetherToWrite) {
  StatusPlanner p = read_node();
  p.set_gated_pods({gated(1, true)}, T0 - 1s);
  p.observe(with({}), T0);
  p.written(p.plan(T0, W0)[0], true, T0);
  EXPECT_TRUE(p.plan(T0 + 1s, W0).empty()) << "the API server already says True";
  p.set_gated_pods({gated(1, false)}, T0 + 2s);  // someone else wrote False
  auto w = p.plan(T0 + 2s, W0);
  ASSERT_EQ(w.size(), 1u);
  p.written(w[0], true, T0 + 2s);
  // A watch event from before our write still shows False: unchanged view, belief kept.
  p.set_gated_pods({gated(1, false)}, T0 + 3s);
  EXPECT_TRUE(p.plan(T0 + 4s, W0).empty());
  // The pod is gone from the watch: its pending write's outcome is ignored, nothing more.
  p.set_gated_pods({}, T0 + 4s);
  EXPECT_EQ(p.gated_pods(), 0u);
  p.observe(with({missing(1)}), T0 + 5s);
  EXPECT_TRUE(pod_writes(p.plan(T0 + 30s, W0)).empty());
}

TEST(KubeStatusPlanner, PodWritesInFlightAreBounded) {
  StatusOptions o = options();
  o.max_pods_in_flight = 3;
  StatusPlanner p = read_node(o);
  std::vector<GatedPod> pods;
  for (int i = 0; i < 10; ++i)
    pods.push_back({{"ml", "p" + std::to_string(i), uid(i) + std::to_string(i)}, std::nullopt, true});
  p.set_gated_pods(pods, T0 - 1s);
  p.observe(with({}), T0);
  auto w = p.plan(T0, W0);
  EXPECT_EQ(w.size(), 1u + 3u);
  EXPECT_TRUE(p.plan(T0, W0).empty()) << "three in flight: no more";
  p.written(w[1], true, T0);
  EXPECT_EQ(p.plan(T0, W0).size(), 1u) << "one slot free";
}

}  // namespace
}  // namespace gdw::kube
