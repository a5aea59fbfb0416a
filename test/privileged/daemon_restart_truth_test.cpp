// The real daemon's node conditions and readiness gate across a restart and at a pod's
// start, against the stateful local API server: a restart finds GPUDeviceAccessDegraded
// "True" and a gate "False" while the container still misses its GPU and never writes a
// recovery; a first start says "Unknown" until its first check; a Pending pod's gate is
// never "True"; an API outage at start delays every write until the node has been read;
// SIGTERM writes nothing.
#include <gtest/gtest.h>
#include <signal.h>

#include <nlohmann/json.hpp>

#include <thread>

#include "support/daemon_api_fixture.h"
#include "support/kubelet_grpc_fakes.h"

namespace gdw::test {
namespace {

using json = nlohmann::json;

constexpr const char* kNode = kApiNode;
constexpr const char* kDegraded = "GPUDeviceAccessDegraded";
constexpr const char* kGate = "gpu-devwatch.io/devices-ready";
constexpr const char* kBefore = "2026-01-15T08:00:00Z";

json pod_object(const SandboxContainer& c, const std::string& phase, std::optional<bool> gate_status) {
  json p = {{"kind", "Pod"},
            {"metadata", {{"name", c.spec.pod_name}, {"namespace", c.spec.pod_namespace}, {"uid", c.spec.pod_uid}}},
            {"spec",
             {{"nodeName", kNode},
              {"containers", json::array({{{"name", c.spec.container_name}}})},
              {"readinessGates", json::array({{{"conditionType", kGate}}})}}},
            {"status", {{"phase", phase}}}};
  if (phase == "Running")
    p["status"]["containerStatuses"] = json::array({{{"name", c.spec.container_name}, {"started", true}}});
  if (gate_status)
    p["status"]["conditions"] = json::array(
        {{{"type", kGate}, {"status", *gate_status ? "True" : "False"}, {"lastTransitionTime", kBefore}}});
  return p;
}

json condition(const std::string& type, const std::string& status) {
  return {{"type", type},       {"status", status},          {"reason", "Before"},
          {"message", "as left"}, {"lastTransitionTime", kBefore}, {"lastHeartbeatTime", kBefore}};
}

class DaemonRestartTruth : public DaemonWithApiServerTest {
 protected:
  // The statuses each node PATCH gave `type`, in order.
  std::vector<std::string> node_writes_of(const std::string& type) {
    std::vector<std::string> out;
    for (const auto& r : api_.requests_to("PATCH", "/api/v1/nodes/"))
      for (const auto& c : r.body["status"]["conditions"])
        if (c["type"] == type) out.push_back(c["status"]);
    return out;
  }
  std::vector<std::string> gate_writes(const SandboxContainer& c) {
    std::vector<std::string> out;
    for (const auto& r : api_.requests_to("PATCH", "/api/v1/namespaces/" + c.spec.pod_namespace + "/pods/" +
                                                       c.spec.pod_name + "/status"))
      out.push_back(r.body["status"]["conditions"][0]["status"]);
    return out;
  }
  void node_as_left(const std::string& degraded) {
    api_.set_node_conditions(json::array({condition(kDegraded, degraded), condition("GPUAllocationRecordStale", "False"),
                                          condition("GPUDevicePluginUnresponsive", "False")}));
  }
};

TEST_F(DaemonRestartTruth, ARestartWithDegradedTrueAndTheGateFalseWritesNoRecovery) {
  node_as_left("True");
  api_.add_pod(pod_object(*c_, "Running", false));
  ASSERT_EQ(node_->cgroups().deny(c_->cgroup_rel, "c 195:0 rw"), 0);  // still missing at the restart
  std::this_thread::sleep_for(100ms);
  ASSERT_TRUE(daemon_->start("mode: observe\n" + api_.config_yaml("", "  grace: 2s\n"))) << daemon_->output();
  ASSERT_TRUE(eventually([&] { return !node_writes_of(kDegraded).empty(); }, 10s)) << daemon_->output();
  std::this_thread::sleep_for(3s);  // past the grace a fresh clock would have started
  for (const auto& s : node_writes_of(kDegraded)) EXPECT_EQ(s, "True") << "never a recovery that did not happen";
  for (const auto& s : gate_writes(*c_)) EXPECT_EQ(s, "False") << "never Ready without its GPU";
  auto degraded = api_.node_conditions()[kDegraded];
  EXPECT_EQ(degraded["lastTransitionTime"], kBefore) << "its grace and transition run from before the restart";
  EXPECT_EQ(degraded["reason"], "ContainersMissingDevices");
  EXPECT_EQ(gate_of(*c_), "False");
  auto all = api_.requests();
  ASSERT_FALSE(all.empty());
  std::size_t first_patch = all.size();
  for (std::size_t i = 0; i < all.size() && first_patch == all.size(); ++i)
    if (all[i].method == "PATCH") first_patch = i;
  bool read_first = false;
  for (std::size_t i = 0; i < first_patch; ++i) read_first |= all[i].method == "GET" && all[i].path == "/api/v1/nodes/gpu-node-1?resourceVersion=0";
  EXPECT_TRUE(read_first) << "the node is read before anything is written";

  ASSERT_EQ(node_->cgroups().allow(c_->cgroup_rel, "c 195:0 rw"), 0);  // a check clears it
  EXPECT_TRUE(eventually([&] { return status_of(kDegraded) == "False" && gate_of(*c_) == "True"; }, 10s))
      << daemon_->output();
}

TEST_F(DaemonRestartTruth, AFirstStartSaysUnknownUntilItsFirstCheck) {
  warm_up_grpc_client();
  const std::string socket = node_->device_plugins_dir() + "/nvidia-gpu.sock";
  auto hung = std::make_unique<SilentSocket>(socket);  // the first round of probes takes its timeout
  ASSERT_TRUE(daemon_->start(api_.config_yaml("", "  readiness_gate: false\n"), false,
                             "  plugin_probe_interval: 10s\n  plugin_probe_timeout: 2s\n"))
      << daemon_->output();
  ASSERT_TRUE(eventually([&] { return status_of(kDegraded) == "Unknown"; }, 5s)) << daemon_->output();
  auto first = api_.requests_to("PATCH", "/api/v1/nodes/").at(0).body["status"]["conditions"];
  ASSERT_EQ(first.size(), 3u);
  for (const auto& c : first) {
    EXPECT_EQ(c["status"], "Unknown");
    EXPECT_EQ(c["reason"], "NotYetChecked");
  }
  ASSERT_TRUE(eventually([&] { return status_of("GPUDevicePluginUnresponsive") == "True"; }, 5s)) << daemon_->output();
  EXPECT_EQ(status_of(kDegraded), "False");
  for (const auto& s : node_writes_of(kDegraded)) EXPECT_NE(s, "True");
}

TEST_F(DaemonRestartTruth, APendingPodsGateIsNeverTrueAndSigtermWritesNothing) {
  node_as_left("False");
  api_.add_pod(pod_object(*c_, "Pending", std::nullopt));
  std::this_thread::sleep_for(100ms);
  ASSERT_TRUE(daemon_->start(api_.config_yaml("", "  grace: 1s\n"))) << daemon_->output();
  ASSERT_TRUE(eventually([&] { return !node_writes_of(kDegraded).empty(); }, 10s)) << daemon_->output();
  std::this_thread::sleep_for(1500ms);
  EXPECT_TRUE(gate_writes(*c_).empty()) << "a Pending pod: its absent gate keeps it unready";
  api_.modify_pod(pod_object(*c_, "Running", std::nullopt));  // every container started
  ASSERT_TRUE(eventually([&] { return gate_of(*c_) == "True"; }, 5s)) << daemon_->output();
  const std::size_t before = api_.requests().size();
  EXPECT_EQ(daemon_->stop(), 0);
  std::this_thread::sleep_for(300ms);
  auto after = api_.requests();
  for (std::size_t i = before; i < after.size(); ++i) EXPECT_NE(after[i].method, "PATCH") << after[i].path;
}

TEST_F(DaemonRestartTruth, AnOutageAtStartDelaysEveryWriteUntilTheNodeIsRead) {
  node_as_left("True");
  api_.add_pod(pod_object(*c_, "Running", false));
  ASSERT_EQ(node_->cgroups().deny(c_->cgroup_rel, "c 195:0 rw"), 0);
  api_.set_mode("500");
  std::this_thread::sleep_for(100ms);
  ASSERT_TRUE(daemon_->start("mode: observe\n" + api_.config_yaml("", "  grace: 1s\n"))) << daemon_->output();
  ASSERT_TRUE(eventually([&] { return api_.requests_to("GET", "/api/v1/nodes/").size() >= 2; }, 10s))
      << "the read is retried";
  EXPECT_TRUE(api_.requests_to("PATCH", "/").empty()) << "nothing written without the node read";
  api_.set_mode("ok");
  ASSERT_TRUE(eventually([&] { return !node_writes_of(kDegraded).empty(); }, 10s)) << daemon_->output();
  std::this_thread::sleep_for(1500ms);
  for (const auto& s : node_writes_of(kDegraded)) EXPECT_EQ(s, "True");
  for (const auto& s : gate_writes(*c_)) EXPECT_EQ(s, "False");
  EXPECT_EQ(api_.node_conditions()[kDegraded]["lastTransitionTime"], kBefore);
}

}  // namespace
}  // namespace gdw::test
