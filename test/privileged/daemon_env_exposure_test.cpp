// Issue 13 items 4 and 5 on the real kernel (cgroup v1): GPUs reached through
// NVIDIA_VISIBLE_DEVICES without an allocation (reported by default and never granted;
// granted back only with devices.env_visible: restore, and only what the variable names),
// and the exposure gauge (0 for a spec that lists its devices, > 0 for a GPU that came out
// of band), seen through the daemon's /metrics and `check --json`. Access proven with
// open() from inside the container's cgroup.
#include <gtest/gtest.h>
#include <signal.h>

#include <cerrno>
#include <nlohmann/json.hpp>
#include <thread>

#include "support/daemon_harness.h"

namespace gdw::test {
namespace {

using json = nlohmann::json;

class EnvAndExposure : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!SandboxNode::available()) GTEST_SKIP() << "needs root and a writable cgroup v1 devices hierarchy";
    node_ = std::make_unique<SandboxNode>();
  }
  void TearDown() override {
    if (daemon_ && daemon_->running()) {
      daemon_->signal(SIGTERM);
      EXPECT_EQ(daemon_->wait(10s), 0) << daemon_->output();
    }
  }
  // The daemon with `devices_extra` continuing the devices: section of the config.
  bool start(const std::string& devices_extra = "") {
    config_ = node_->write_config(devices_extra + "metrics:\n  listen: 127.0.0.1:" + std::to_string(port_) +
                                  "\nprobe:\n  enabled: false\nlog:\n  level: debug\n");
    daemon_ = std::make_unique<BackgroundProcess>(std::vector<std::string>{GDW_BINARY, "run", "--config", config_});
    if (!daemon_->wait_for_output(" ready", 15s)) return false;
    return eventually([&] { return !http_get(port_).empty(); }, 5s);
  }
  double metric(const std::string& name, const std::map<std::string, std::string>& labels = {}) const {
    return metric_value(http_get(port_), name, labels).value_or(-1);
  }
  CommandResult check(bool as_json) {
    std::vector<std::string> argv = {GDW_BINARY, "check", "--config", config_};
    if (as_json) argv.push_back("--json");
    return run_command(argv);
  }
  static std::map<std::string, std::string> labels(const SandboxContainer& c) {
    return {{"namespace", c.spec.pod_namespace}, {"pod", c.spec.pod_name}, {"container", c.spec.container_name}};
  }
  const SandboxContainer& env_only(const std::string& value, std::vector<int> hook_gpus) {
    return node_->add_container({.pod_namespace = "lab", .pod_name = "notebook-0", .container_name = "jupyter",
                                 .env = {"PATH=/bin", "NVIDIA_VISIBLE_DEVICES=" + value},
                                 .env_hook_gpus = std::move(hook_gpus)});
  }

  std::unique_ptr<SandboxNode> node_;
  std::unique_ptr<BackgroundProcess> daemon_;
  int port_ = free_port();
  std::string config_;
};

TEST_F(EnvAndExposure, EnvOnlyContainerIsReportedAndNotGrantedByDefault) {
  const auto& c = env_only("all", {0, 1});
  node_->write_checkpoint();
  ASSERT_EQ(node_->open_errno(c, "nvidia0"), ENXIO) << "the hook granted it at start";
  ASSERT_TRUE(start()) << daemon_->output();
  EXPECT_EQ(metric("gpu_devwatch_env_visible_containers"), 1) << http_get(port_);
  EXPECT_EQ(metric("gpu_devwatch_containers_watched"), 0);

  node_->reapply_spec(c);
  ASSERT_EQ(node_->open_errno(c, "nvidia0"), EPERM);
  std::this_thread::sleep_for(700ms);  // far beyond a repair (sub-millisecond)
  EXPECT_EQ(node_->open_errno(c, "nvidia0"), EPERM) << "report mode never grants\n" << daemon_->output();
  EXPECT_EQ(node_->open_errno(c, "nvidia1"), EPERM);
  EXPECT_EQ(node_->open_errno(c, "nvidiactl"), EPERM);

  auto text = check(false);
  EXPECT_NE(text.out.find("ENV-ONLY lab/notebook-0/jupyter: NVIDIA_VISIBLE_DEVICES=all"), std::string::npos) << text.out;
  EXPECT_NE(text.out.find("reported only"), std::string::npos) << text.out;
  auto out = check(true);
  auto doc = json::parse(out.out);
  ASSERT_EQ(doc["env_visible"].size(), 1u) << out.out;
  const auto& e = doc["env_visible"][0];
  EXPECT_EQ(e["pod"], "notebook-0");
  EXPECT_EQ(e["restored"], false);
  EXPECT_EQ(e["device_ids"], json({node_->gpu_uuid(0), node_->gpu_uuid(1)}));
  EXPECT_TRUE(doc["containers"].empty()) << "not a GPU container in report mode";
  EXPECT_EQ(node_->open_errno(c, "nvidia0"), EPERM) << "check without --repair grants nothing";
}

TEST_F(EnvAndExposure, RestoreGrantsBackExactlyWhatTheVariableNames) {
  // Index 1 in NVML order (PCI bus order: 0000:10 is GPU 0, 0000:11 is GPU 1).
  const auto& c = env_only("1", {1});
  node_->write_checkpoint();
  ASSERT_TRUE(start("  env_visible: restore\n")) << daemon_->output();
  EXPECT_TRUE(eventually([&] { return metric("gpu_devwatch_containers_watched") == 1; })) << daemon_->output();
  EXPECT_EQ(metric("gpu_devwatch_env_visible_containers"), 1);

  node_->reapply_spec(c);
  EXPECT_TRUE(eventually([&] { return node_->open_errno(c, "nvidia1") == ENXIO; }, 3s)) << daemon_->output();
  EXPECT_EQ(node_->open_errno(c, "nvidiactl"), ENXIO);
  EXPECT_EQ(node_->open_errno(c, "nvidia-uvm"), ENXIO);
  EXPECT_EQ(node_->open_errno(c, "nvidia0"), EPERM) << "never a GPU the variable does not name";

  auto doc = json::parse(check(true).out);
  ASSERT_EQ(doc["env_visible"].size(), 1u);
  EXPECT_EQ(doc["env_visible"][0]["restored"], true);
  EXPECT_EQ(doc["env_visible"][0]["device_ids"], json({node_->gpu_uuid(1)}));
}

TEST_F(EnvAndExposure, ExposureIsZeroForASpecThatListsItsDevicesAndCountsOutOfBandOnes) {
  const auto& listed = node_->add_container(
      {.pod_namespace = "ml", .pod_name = "cdi-0", .container_name = "trainer", .device_ids = {node_->gpu_uuid(0)},
       .spec_extra_allow = {"c 195:0 rw", "c 195:255 rw", "c 237:0 rw", "c 237:1 rw"}});
  const auto& out_of_band = node_->add_container(
      {.pod_namespace = "ml", .pod_name = "envvar-0", .container_name = "trainer", .device_ids = {node_->gpu_uuid(1)}});
  node_->write_checkpoint();
  ASSERT_TRUE(start()) << daemon_->output();
  EXPECT_TRUE(eventually([&] { return metric("gpu_devwatch_containers_watched") == 2; })) << daemon_->output();
  EXPECT_EQ(metric("gpu_devwatch_exposed_devices", labels(listed)), 0) << http_get(port_);
  // nvidia1, nvidiactl, nvidia-uvm, nvidia-uvm-tools: none in its spec.
  EXPECT_EQ(metric("gpu_devwatch_exposed_devices", labels(out_of_band)), 4) << http_get(port_);
  EXPECT_EQ(metric("gpu_devwatch_containers_exposed"), 1);
  EXPECT_EQ(metric("gpu_devwatch_env_visible_containers"), 0) << "an allocation wins over NVIDIA_VISIBLE_DEVICES=all";

  // The exposure is real: a runtime re-apply takes exactly the exposed devices (repaired then).
  EXPECT_EQ(node_->open_errno(listed, "nvidia0"), ENXIO);

  auto out = check(true);
  auto doc = json::parse(out.out);
  EXPECT_EQ(doc["exposed_containers"], 1);
  std::map<std::string, int> exposed;
  for (const auto& c : doc["containers"]) exposed[c["pod"]] = c["exposed_devices"];
  EXPECT_EQ(exposed, (std::map<std::string, int>{{"cdi-0", 0}, {"envvar-0", 4}})) << out.out;
  auto text = check(false);
  EXPECT_NE(text.out.find("EXPOSED ml/envvar-0/trainer: the next re-apply would revoke nvidia1 (spec)"),
            std::string::npos) << text.out;
  EXPECT_EQ(text.out.find("EXPOSED ml/cdi-0"), std::string::npos) << text.out;

  // Removing the container drops its series and the total.
  node_->remove_container(out_of_band);
  EXPECT_TRUE(eventually([&] { return metric("gpu_devwatch_containers_exposed") == 0; })) << http_get(port_);
  EXPECT_EQ(metric("gpu_devwatch_exposed_devices", {{"pod", "envvar-0"}}), -1);
}

}  // namespace
}  // namespace gdw::test
