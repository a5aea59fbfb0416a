// Node conditions and the pod readiness gate from the real daemon on real v1 device
// cgroups, written to a local HTTPS API server (CA made by the test): each condition goes
// "True" on its fault (an observe-mode revocation past the grace, a stale checkpoint, a hung
// device plugin) and back to "False"; a re-assert keeps lastTransitionTime; the gate follows
// the pod's device access and is never written for a pod without it, through a dropped
// watch; an API server answering 500 or hanging never delays a repair. The API server runs
// deploy/kubernetes/admission-policy.yaml on every status write (fake_apiserver.h), so each
// of these also shows that the shipped policies admit the daemon's own writes; the last
// test shows that they are enforced there.
#include <gtest/gtest.h>
#include <signal.h>

#include <cerrno>
#include <filesystem>
#include <thread>

#include "kubelet/checkpoint.h"
#include "support/daemon_api_fixture.h"
#include "support/kubelet_grpc_fakes.h"

namespace gdw::test {
namespace {

constexpr const char* kDegraded = "GPUDeviceAccessDegraded";
constexpr const char* kStale = "GPUAllocationRecordStale";
constexpr const char* kPlugin = "GPUDevicePluginUnresponsive";

class DaemonConditions : public DaemonWithApiServerTest {
 protected:
  bool all_false() { return status_of(kDegraded) == "False" && status_of(kStale) == "False" && status_of(kPlugin) == "False"; }
};

TEST_F(DaemonConditions, DegradedFollowsAnObserveModeRevocationPastTheGrace) {
  ASSERT_TRUE(daemon_->start("mode: observe\n" + api_.config_yaml("", "  grace: 1s\n  readiness_gate: false\n")))
      << daemon_->output();
  ASSERT_TRUE(eventually([&] { return all_false(); })) << daemon_->output();
  auto first = api_.requests_to("PATCH", "/api/v1/nodes/")[0];
  EXPECT_EQ(first.path, "/api/v1/nodes/gpu-node-1/status");
  EXPECT_EQ(first.content_type, "application/strategic-merge-patch+json");
  EXPECT_EQ(first.authorization, "Bearer token-one");
  ASSERT_EQ(first.body["status"]["conditions"].size(), 3u) << "all three at start";
  auto start = api_.node_conditions();
  EXPECT_EQ(start[kDegraded]["reason"], "GPUDeviceAccessOK");
  EXPECT_EQ(start[kStale]["reason"], "CheckpointFresh");
  EXPECT_EQ(start[kPlugin]["reason"], "DevicePluginsResponsive");

  ASSERT_EQ(node_->cgroups().deny(c_->cgroup_rel, "c 195:0 rw"), 0);
  std::this_thread::sleep_for(500ms);
  EXPECT_EQ(status_of(kDegraded), "False") << "within the grace";
  ASSERT_TRUE(eventually([&] { return status_of(kDegraded) == "True"; }, 5s)) << daemon_->output();
  auto degraded = api_.node_conditions()[kDegraded];
  EXPECT_EQ(degraded["reason"], "ContainersMissingDevices");
  EXPECT_NE(degraded.value("message", "").find("1 container(s) in 1 pod(s)"), std::string::npos) << degraded.dump();
  EXPECT_EQ(degraded.value("message", "").find("trainer"), std::string::npos) << "no tenant's name: " << degraded.dump();
  EXPECT_EQ(daemon_->metric("gpu_devwatch_node_condition", {{"condition", kDegraded}}), 1);
  EXPECT_EQ(node_->open_errno(*c_, "nvidia0"), EPERM) << "observe mode never writes";

  // A SIGHUP rebuilds the reporter: the condition, its grace clock and its transition
  // time carry over (no flap to "False" and back).
  const auto degraded_since = degraded["lastTransitionTime"];
  const std::size_t writes = api_.requests_to("PATCH", "/api/v1/nodes/").size();
  daemon_->process().signal(SIGHUP);
  ASSERT_TRUE(daemon_->process().wait_for_output("SIGHUP: configuration reloaded")) << daemon_->output();
  std::this_thread::sleep_for(1500ms);
  auto since_reload = api_.requests_to("PATCH", "/api/v1/nodes/");
  for (std::size_t i = writes; i < since_reload.size(); ++i)
    EXPECT_EQ(since_reload[i].body["status"]["conditions"][0]["status"], "True") << since_reload[i].body.dump();
  EXPECT_EQ(api_.node_conditions()[kDegraded]["lastTransitionTime"], degraded_since);

  // Someone else grants it back: no longer missing, "False" again.
  ASSERT_EQ(node_->cgroups().allow(c_->cgroup_rel, "c 195:0 rw"), 0);
  ASSERT_TRUE(eventually([&] { return status_of(kDegraded) == "False"; }, 5s)) << daemon_->output();
  auto after = api_.node_conditions();
  EXPECT_EQ(after[kDegraded]["reason"], "GPUDeviceAccessOK");
  EXPECT_NE(after[kDegraded]["lastTransitionTime"], start[kDegraded]["lastTransitionTime"]);
  EXPECT_EQ(after[kStale]["lastTransitionTime"], start[kStale]["lastTransitionTime"]) << "unchanged: kept";
  EXPECT_EQ(daemon_->metric("gpu_devwatch_node_condition", {{"condition", kDegraded}}), 0);
  EXPECT_TRUE(eventually([&] {  // counted when the answer is in, a moment after the server has the write
    return daemon_->metric("gpu_devwatch_status_writes_total", {{"object", "node"}, {"result", "sent"}}) >= 3;
  })) << daemon_->metrics();
  EXPECT_TRUE(api_.requests_to("GET", "/api/v1/pods").empty()) << "readiness_gate: false lists no pods";
}

TEST_F(DaemonConditions, AReassertKeepsLastTransitionTime) {
  ASSERT_TRUE(daemon_->start(api_.config_yaml("", "  resync: 1500ms\n  readiness_gate: false\n"))) << daemon_->output();
  ASSERT_TRUE(eventually([&] { return api_.requests_to("PATCH", "/api/v1/nodes/").size() >= 3; }, 8s))
      << daemon_->output();
  auto writes = api_.requests_to("PATCH", "/api/v1/nodes/");
  for (std::size_t i = 1; i < 3; ++i) {
    for (std::size_t k = 0; k < 3; ++k) {
      const auto& was = writes[0].body["status"]["conditions"][k];
      const auto& now = writes[i].body["status"]["conditions"][k];
      EXPECT_EQ(now["type"], was["type"]);
      EXPECT_EQ(now["status"], "False");
      EXPECT_EQ(now["lastTransitionTime"], was["lastTransitionTime"]) << "re-assert " << i;
    }
  }
  EXPECT_NE(writes[2].body["status"]["conditions"][0]["lastHeartbeatTime"],
            writes[0].body["status"]["conditions"][0]["lastHeartbeatTime"]);
}

TEST_F(DaemonConditions, AStaleCheckpointAndBack) {
  ASSERT_TRUE(daemon_->start(api_.config_yaml("", "  readiness_gate: false\n"))) << daemon_->output();
  ASSERT_TRUE(eventually([&] { return all_false(); })) << daemon_->output();
  // GPU UUIDs changed at a reboot: the checkpoint registers a GPU this host does not have.
  CheckpointWriteEntry trainer{c_->spec.pod_uid, "trainer", "nvidia.com/gpu", {{0, {node_->gpu_uuid(0)}}}, {}};
  const std::string tmp = node_->device_plugins_dir() + "/.checkpoint.tmp";
  write_file(tmp, write_checkpoint({trainer}, {{"nvidia.com/gpu", {node_->gpu_uuid(0), node_->gpu_uuid(1),
                                                                    "GPU-deadbeef-0000-4000-8000-000000000000"}}}));
  ASSERT_EQ(::rename(tmp.c_str(), node_->checkpoint_path().c_str()), 0);
  ASSERT_TRUE(eventually([&] { return status_of(kStale) == "True"; }, 5s)) << daemon_->output();
  EXPECT_EQ(api_.node_conditions()[kStale]["reason"], "CheckpointStale");
  node_->write_checkpoint();  // kubelet writes a fresh one
  ASSERT_TRUE(eventually([&] { return status_of(kStale) == "False"; }, 5s)) << daemon_->output();
  EXPECT_EQ(api_.node_conditions()[kStale]["reason"], "CheckpointFresh");
}

TEST_F(DaemonConditions, AHungDevicePluginAndBack) {
  warm_up_grpc_client();
  const std::string socket = node_->device_plugins_dir() + "/nvidia-gpu.sock";
  auto hung = std::make_unique<SilentSocket>(socket);
  ASSERT_TRUE(daemon_->start(api_.config_yaml("", "  readiness_gate: false\n"), false,
                             "  plugin_probe_interval: 1s\n  plugin_probe_timeout: 300ms\n"))
      << daemon_->output();
  ASSERT_TRUE(eventually([&] { return status_of(kPlugin) == "True"; }, 5s)) << daemon_->output();
  auto c = api_.node_conditions()[kPlugin];
  EXPECT_EQ(c["reason"], "DevicePluginHung");
  EXPECT_NE(c.value("message", "").find("nvidia-gpu.sock"), std::string::npos) << c.dump();
  hung.reset();
  std::filesystem::remove(socket);
  FakeDevicePlugin answering(socket);  // the plugin restarted
  ASSERT_TRUE(eventually([&] { return status_of(kPlugin) == "False"; }, 5s)) << daemon_->output();
  EXPECT_EQ(api_.node_conditions()[kPlugin]["reason"], "DevicePluginsResponsive");
}

TEST_F(DaemonConditions, TheReadinessGateFollowsThePodThroughADroppedWatch) {
  const auto& plain = node_->add_container({.pod_namespace = "ml", .pod_name = "plain-0", .container_name = "c",
                                            .device_ids = {node_->gpu_uuid(1)}});
  node_->write_checkpoint();
  api_.add_pod(running_pod_object(*c_, true));
  api_.add_pod(running_pod_object(plain, false));
  std::this_thread::sleep_for(100ms);
  ASSERT_TRUE(daemon_->start("mode: observe\n" + api_.config_yaml("", "  grace: 1s\n"))) << daemon_->output();
  ASSERT_TRUE(eventually([&] { return gate_of(*c_) == "True"; }, 5s)) << daemon_->output();
  EXPECT_EQ(api_.pod_condition("ml", "trainer-0")["reason"], "GPUDevicesReady");
  auto patch = api_.requests_to("PATCH", "/api/v1/namespaces/ml/pods/trainer-0/status").at(0);
  EXPECT_EQ(patch.body["metadata"]["uid"], c_->spec.pod_uid);

  // Both pods lose a device in observe mode; only the gated one is written.
  ASSERT_EQ(node_->cgroups().deny(c_->cgroup_rel, "c 195:0 rw"), 0);
  ASSERT_EQ(node_->cgroups().deny(plain.cgroup_rel, "c 195:1 rw"), 0);
  ASSERT_TRUE(eventually([&] { return gate_of(*c_) == "False"; }, 5s)) << daemon_->output();
  auto missing = api_.pod_condition("ml", "trainer-0");
  EXPECT_EQ(missing["reason"], "GPUDevicesMissing");
  EXPECT_NE(missing.value("message", "").find("trainer"), std::string::npos) << missing.dump();

  // The watch is cut off; a pod that arrives after it is still seen (reconnected).
  api_.drop_watches();
  const auto& late = node_->add_container({.pod_namespace = "ml", .pod_name = "late-0", .container_name = "w"});
  api_.add_pod(running_pod_object(late, true));
  ASSERT_TRUE(eventually([&] { return gate_of(late) == "True"; }, 5s)) << daemon_->output();

  ASSERT_EQ(node_->cgroups().allow(c_->cgroup_rel, "c 195:0 rw"), 0);  // repaired (by hand: observe mode)
  ASSERT_TRUE(eventually([&] { return gate_of(*c_) == "True"; }, 5s)) << daemon_->output();
  std::this_thread::sleep_for(1500ms);  // well past plain-0's grace
  EXPECT_TRUE(api_.requests_to("PATCH", "/api/v1/namespaces/ml/pods/plain-0").empty()) << "no gate: never written";
  EXPECT_TRUE(api_.pod_condition("ml", "plain-0").is_null());
  EXPECT_EQ(daemon_->metric("gpu_devwatch_readiness_gate_pods"), 2);
  EXPECT_EQ(status_of(kDegraded), "True") << "plain-0 still misses its device";
}

// Each revocation repaired at once (the same bound as the events' tests) while every API
// call fails or hangs.
void repairs_stay_prompt(DaemonHarness& daemon, SandboxNode& node, const SandboxContainer& c) {
  // Startup's own work (giving back startup-only pages after READY) is over first.
  ASSERT_TRUE(eventually([&] {
    const std::string out = daemon.output();
    return out.find("startup-only file pages") != std::string::npos || out.find("keeping startup memory") != std::string::npos;
  })) << daemon.output();
  for (int i = 0; i < 5; ++i) {
    ASSERT_EQ(node.cgroups().deny(c.cgroup_rel, "c 195:0 rw"), 0);
    const auto start = std::chrono::steady_clock::now();
    ASSERT_TRUE(daemon.eventually_errno(c, "nvidia0", ENXIO, 1s)) << "revocation " << i << "\n" << daemon.output();
    EXPECT_LT(std::chrono::steady_clock::now() - start, 200ms) << "revocation " << i;
  }
}

TEST_F(DaemonConditions, AnAPIServerAnswering500NeverDelaysARepair) {
  api_.set_mode("500");
  api_.add_pod(running_pod_object(*c_, true));
  ASSERT_TRUE(daemon_->start(api_.config_yaml("", "  grace: 0ms\n"))) << daemon_->output();
  // The node's read (before any write) is refused, and retried.
  ASSERT_TRUE(eventually([&] { return api_.requests_to("GET", "/api/v1/nodes/").size() >= 2; }, 8s))
      << daemon_->output();
  repairs_stay_prompt(*daemon_, *node_, *c_);
  EXPECT_EQ(daemon_->metric("gpu_devwatch_pod_watch_up"), 0);
  api_.set_mode("ok");  // back: the conditions and the gate arrive (retried with back-off)
  EXPECT_TRUE(eventually([&] { return all_false() && gate_of(*c_) == "True"; }, 20s)) << daemon_->output();
  EXPECT_TRUE(eventually([&] { return daemon_->metric("gpu_devwatch_pod_watch_up") == 1; }, 5s));
}

TEST_F(DaemonConditions, AHangingAPIServerNeverDelaysARepairNorTheExit) {
  api_.set_mode("hang");
  api_.add_pod(running_pod_object(*c_, true));
  ASSERT_TRUE(daemon_->start(api_.config_yaml("", "  grace: 0ms\n"))) << daemon_->output();
  ASSERT_TRUE(eventually([&] { return api_.requests_to("GET", "/api/v1/nodes/").size() >= 1; })) << daemon_->output();
  repairs_stay_prompt(*daemon_, *node_, *c_);
  const auto start = std::chrono::steady_clock::now();
  EXPECT_EQ(daemon_->stop(), 0);
  EXPECT_LT(std::chrono::steady_clock::now() - start, 2s) << "SIGTERM does not wait for the hung requests";
  api_.set_mode("ok");
}

// The other half of what every test above shows: the admission policies the API server
// runs are enforced. A daemon whose token is bound to another node (a token copied off
// gpu-node-2, say) gets every node status write refused with the policy's reason, the node
// keeps the conditions it had, and the daemon says so in its log and metrics.
TEST_F(DaemonConditions, TheShippedAdmissionPolicyRefusesATokenOfAnotherNode) {
  FakeApiServer elsewhere(/*hang=*/false, "gpu-node-2");
  ASSERT_TRUE(elsewhere.running()) << elsewhere.setup_error();
  ASSERT_TRUE(daemon_->start(elsewhere.config_yaml("", "  readiness_gate: false\n"))) << daemon_->output();
  ASSERT_TRUE(eventually([&] {
    return daemon_->metric("gpu_devwatch_status_writes_total", {{"object", "node"}, {"result", "rejected"}}) >= 1;
  })) << daemon_->metrics() << daemon_->output();
  ASSERT_FALSE(elsewhere.requests_to("PATCH", "/api/v1/nodes/gpu-node-1/status").empty());
  EXPECT_TRUE(elsewhere.node_conditions().empty()) << "a refused write changes nothing";
  EXPECT_LT(daemon_->metric("gpu_devwatch_status_writes_total", {{"object", "node"}, {"result", "sent"}}), 1)
      << "none sent (-1: no such series yet)";
  EXPECT_TRUE(daemon_->process().wait_for_output(
      "ValidatingAdmissionPolicy 'gpu-devwatch-node-status' with binding 'gpu-devwatch-node-status' denied request: "
      "gpu-devwatch on node gpu-node-2 may patch only its own node, not gpu-node-1"))
      << daemon_->output();
}

}  // namespace
}  // namespace gdw::test
