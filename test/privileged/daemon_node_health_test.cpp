// The node faults beside drift, as the running daemon sees them: kubelet's PodResources
// API (a real gRPC server in the test) as a second allocation record, a hung or throttling
// kubelet, device plugins that stop answering, and a stale checkpoint after a reboot onto
// other GPUs. The daemon keeps repairing throughout and the metrics say what happened.
#include <gtest/gtest.h>

#include <cerrno>
#include <filesystem>
#include <thread>

#include "kubelet/checkpoint.h"

#include "support/daemon_pod_resources_fixture.h"

namespace gdw::test {
namespace {

using DaemonNodeHealth = DaemonWithPodResourcesTest;

TEST_F(DaemonNodeHealth, AContainerOnlyPodResourcesKnowsIsRepairedAndTheDisagreementReported) {
  // Running, with a GPU, but the checkpoint does not record it (e.g. written before a crash).
  const auto& c = node_->add_container({.pod_namespace = "ml", .pod_name = "late-0", .container_name = "worker",
                                        .device_ids = {node_->gpu_uuid(1)}, .in_checkpoint = false});
  node_->write_checkpoint();
  FakePodResources kubelet(node_->pod_resources_socket());
  kubelet.set_response(
      one_container_listing(c.spec.pod_namespace, c.spec.pod_name, c.spec.container_name, node_->gpu_uuid(1)));
  ASSERT_TRUE(daemon_->start("", false, "  pod_resources_interval: 200ms\n")) << daemon_->output();
  EXPECT_TRUE(eventually([&] { return daemon_->metric("gpu_devwatch_containers_watched") == 1; })) << daemon_->output();
  EXPECT_EQ(daemon_->metric("gpu_devwatch_allocation_disagreements"), 1);
  EXPECT_GE(daemon_->metric("gpu_devwatch_pod_resources_calls_total", {{"result", "ok"}}), 1);
  EXPECT_TRUE(daemon_->process().wait_for_output("checkpoint and PodResources disagree")) << daemon_->output();
  node_->reapply_spec(c);
  EXPECT_TRUE(daemon_->eventually_errno(c, "nvidia1", ENXIO)) << daemon_->output();
}

TEST_F(DaemonNodeHealth, AHungOrThrottlingKubeletNeverStallsRepairs) {
  const auto& c = node_->add_container({.pod_namespace = "ml", .pod_name = "p", .container_name = "c",
                                        .device_ids = {node_->gpu_uuid(0)}});
  node_->write_checkpoint();
  FakePodResources kubelet(node_->pod_resources_socket());
  kubelet.set_delay(std::chrono::seconds(30));  // answers far past the deadline
  ASSERT_TRUE(daemon_->start("", false, "  pod_resources_timeout: 300ms\n  pod_resources_interval: 500ms\n"))
      << daemon_->output();
  // While calls to kubelet hang, revocations are still repaired at once.
  node_->reapply_spec(c);
  EXPECT_TRUE(daemon_->eventually_errno(c, "nvidia0", ENXIO, std::chrono::milliseconds(500))) << daemon_->output();
  EXPECT_TRUE(eventually([&] {
    return daemon_->metric("gpu_devwatch_pod_resources_calls_total", {{"result", "deadline-exceeded"}}) >= 1;
  })) << daemon_->metrics();
  EXPECT_EQ(daemon_->metric("gpu_devwatch_pod_resources_up"), 0);

  kubelet.set_delay(std::chrono::milliseconds(0));
  kubelet.set_status(grpc::Status(grpc::StatusCode::RESOURCE_EXHAUSTED, "rate limited"));
  EXPECT_TRUE(eventually([&] {
    return daemon_->metric("gpu_devwatch_pod_resources_calls_total", {{"result", "resource-exhausted"}}) >= 1;
  }, std::chrono::seconds(10))) << daemon_->metrics();
  // Self rate limit: never more than one call per interval.
  EXPECT_LE(kubelet.list_calls(), 40);
  node_->reapply_spec(c);
  EXPECT_TRUE(daemon_->eventually_errno(c, "nvidia0", ENXIO)) << daemon_->output();
}

TEST_F(DaemonNodeHealth, DevicePluginsThatStopAnsweringAreExported) {
  node_->write_checkpoint();
  FakeDevicePlugin good(node_->device_plugins_dir() + "/nvidia-gpu.sock");
  SilentSocket hung(node_->device_plugins_dir() + "/hung.sock");
  make_stale_socket(node_->device_plugins_dir() + "/dead.sock");
  ASSERT_TRUE(daemon_->start("", false, "  plugin_probe_interval: 1s\n  plugin_probe_timeout: 300ms\n"))
      << daemon_->output();
  EXPECT_TRUE(eventually([&] {
    return daemon_->metric("gpu_devwatch_device_plugin_up", {{"socket", "hung.sock"}}) == 0 &&
           daemon_->metric("gpu_devwatch_device_plugin_up", {{"socket", "dead.sock"}}) == 0 &&
           daemon_->metric("gpu_devwatch_device_plugin_up", {{"socket", "nvidia-gpu.sock"}}) == 1;
  })) << daemon_->metrics();
  EXPECT_TRUE(daemon_->process().wait_for_output("device plugin hung.sock does not answer")) << daemon_->output();
  // kubelet's own socket is not a plugin.
  EXPECT_EQ(daemon_->metric("gpu_devwatch_device_plugin_up", {{"socket", "kubelet.sock"}}), -1);
  // A plugin that goes away leaves no series behind.
  std::filesystem::remove(node_->device_plugins_dir() + "/dead.sock");
  EXPECT_TRUE(eventually([&] {
    return daemon_->metric("gpu_devwatch_device_plugin_up", {{"socket", "dead.sock"}}) == -1;
  }, std::chrono::seconds(5))) << daemon_->metrics();
}

// --- Stale-checkpoint remediation -------------------------------------------------------
//
// The daemon here runs with the stand-in NVML (test/support/fake_nvml.c) reading its
// answer from files, so a test changes what the next `nvml-query` child sees (a MIG
// geometry change, a failing driver). The restart goes to a bus that does not exist: a
// remediation shows as the checkpoint moved aside and remediations_total{result="error"}.

constexpr const char* kStaleRemediation =
    "  source: checkpoint\n  remediate_stale_checkpoint: true\n";
constexpr const char* kNoBus = "systemd:\n  bus_address: unix:path=/nonexistent/bus\n  timeout: 300ms\n";
constexpr const char* kMigResource = "nvidia.com/mig-1g.10gb";

class StaleCheckpointDaemon {
 public:
  StaleCheckpointDaemon(SandboxNode& node, const std::string& kubelet_extra)
      : node_(node), port_(free_port()) {
    devices_file_ = files_.write("nvml-devices", "");
    mode_file_ = files_.write("nvml-mode", "ok");
    std::string config = node.write_config("metrics:\n  listen: 127.0.0.1:" + std::to_string(port_) +
                                               "\nprobe:\n  enabled: false\nlog:\n  level: debug\n" + kNoBus,
                                           std::string(kStaleRemediation) + kubelet_extra);
    std::string text = read_file(config);
    const std::string nvml = "/nonexistent/libnvidia-ml.so.1";
    text.replace(text.find(nvml), nvml.size(), GDW_FAKE_NVML);
    write_file(config, text);
    config_ = config;
  }
  void set_nvml_devices(const std::string& spec) { write_file(devices_file_, spec); }
  void set_nvml_mode(const std::string& mode) { write_file(mode_file_, mode); }
  bool start() {
    daemon_ = std::make_unique<BackgroundProcess>(
        std::vector<std::string>{GDW_BINARY, "run", "--config", config_},
        std::vector<std::string>{"FAKE_NVML_DEVICES_FILE=" + devices_file_, "FAKE_NVML_MODE_FILE=" + mode_file_});
    return daemon_->wait_for_output(" ready", 15s) && eventually([&] { return !http_get(port_).empty(); });
  }
  double metric(const std::string& name, const std::map<std::string, std::string>& labels = {}) const {
    return metric_value(http_get(port_), name, labels).value_or(-1);
  }
  std::string output() const { return daemon_ ? daemon_->output() : ""; }
  bool process_wait(const std::string& needle, std::chrono::milliseconds timeout = 5s) {
    return daemon_->wait_for_output(needle, timeout);
  }
  std::size_t count(const std::string& needle) const {
    const std::string out = output();
    std::size_t n = 0;
    for (auto at = out.find(needle); at != std::string::npos; at = out.find(needle, at + 1)) ++n;
    return n;
  }
  bool remediated() const {
    return metric("gpu_devwatch_checkpoint_remediations_total", {{"result", "error"}}) >= 1 ||
           !std::filesystem::exists(node_.checkpoint_path());
  }

 private:
  SandboxNode& node_;
  int port_;
  TempDir files_{"gdw-nvml"};
  std::string devices_file_, mode_file_, config_;
  std::unique_ptr<BackgroundProcess> daemon_;
};

// Written as kubelet does (temp file, rename), with the entries and BootID given.
void write_kubelet_checkpoint(SandboxNode& node, const std::vector<CheckpointWriteEntry>& entries,
                              const std::map<std::string, std::vector<std::string>>& registered,
                              const std::optional<std::string>& boot_id = std::nullopt) {
  const std::string tmp = node.device_plugins_dir() + "/.checkpoint.tmp";
  write_file(tmp, write_checkpoint(entries, registered, boot_id));
  ASSERT_EQ(::rename(tmp.c_str(), node.checkpoint_path().c_str()), 0);
}

CheckpointWriteEntry allocation(const std::string& pod_uid, const std::string& container, const std::string& resource,
                                const std::string& device_id) {
  CheckpointWriteEntry e;
  e.pod_uid = pod_uid;
  e.container_name = container;
  e.resource = resource;
  e.device_ids_by_numa[0] = {device_id};
  return e;
}

bool stale_copy_kept(const SandboxNode& node) {
  for (const auto& e : std::filesystem::directory_iterator(node.device_plugins_dir()))
    if (e.path().filename().string().rfind("kubelet_internal_checkpoint.stale-", 0) == 0) return true;
  return false;
}

TEST_F(DaemonNodeHealth, AMigGeometryChangeIsNotTakenForAStaleCheckpoint) {
  // Before: GPU 0 split into MIG A, allocated to a pod. NVML's answer is cached.
  const std::string gpu = node_->gpu_uuid(0), mig_a = "MIG-" + random_uuid(), mig_b = "MIG-" + random_uuid();
  StaleCheckpointDaemon daemon(*node_, "  stale_confirm_after: 300ms\n");
  daemon.set_nvml_devices(gpu + ":0;" + mig_a + "@0/1/0");
  write_kubelet_checkpoint(*node_, {allocation(random_uuid(), "old", kMigResource, mig_a)}, {{kMigResource, {mig_a}}});
  ASSERT_TRUE(daemon.start()) << daemon.output();
  ASSERT_TRUE(eventually([&] { return daemon.count("NVML reported 1 MIG device(s)") == 1; })) << daemon.output();
  EXPECT_EQ(daemon.metric("gpu_devwatch_checkpoint_stale"), 0);

  // The geometry changes (MIG B replaces A), then kubelet names B in its checkpoint.
  daemon.set_nvml_devices(gpu + ":0;" + mig_b + "@0/2/0");
  write_kubelet_checkpoint(*node_, {allocation(random_uuid(), "new", kMigResource, mig_b)}, {{kMigResource, {mig_b}}});

  // NVML is asked again before anything is judged stale for remediation; its answer
  // lists B: the checkpoint describes this host.
  EXPECT_TRUE(eventually([&] { return daemon.count("NVML reported 1 MIG device(s)") >= 2; })) << daemon.output();
  EXPECT_TRUE(eventually([&] { return daemon.metric("gpu_devwatch_checkpoint_stale") == 0; })) << daemon.output();
  // Well past the confirmation window: nothing was moved, kubelet was not restarted.
  std::this_thread::sleep_for(1500ms);
  EXPECT_TRUE(std::filesystem::exists(node_->checkpoint_path())) << daemon.output();
  EXPECT_FALSE(daemon.remediated()) << daemon.output();
  EXPECT_EQ(daemon.metric("gpu_devwatch_checkpoint_remediations_total"), -1);
  EXPECT_EQ(daemon.metric("gpu_devwatch_checkpoint_stale"), 0) << daemon.output();
}

TEST_F(DaemonNodeHealth, AStaleVerdictNvmlCannotConfirmIsNotRemediated) {
  const std::string gpu = node_->gpu_uuid(0), mig_a = "MIG-" + random_uuid(), mig_c = "MIG-" + random_uuid();
  StaleCheckpointDaemon daemon(*node_, "  stale_confirm_after: 300ms\n");
  daemon.set_nvml_devices(gpu + ":0;" + mig_a + "@0/1/0");
  write_kubelet_checkpoint(*node_, {allocation(random_uuid(), "old", kMigResource, mig_a)}, {{kMigResource, {mig_a}}});
  ASSERT_TRUE(daemon.start()) << daemon.output();
  ASSERT_TRUE(eventually([&] { return daemon.count("NVML reported 1 MIG device(s)") == 1; })) << daemon.output();

  // A MIG UUID NVML does not list, and from now on the driver does not answer.
  daemon.set_nvml_mode("fail");
  write_kubelet_checkpoint(*node_, {allocation(random_uuid(), "new", kMigResource, mig_c)}, {{kMigResource, {mig_c}}});
  EXPECT_TRUE(daemon.process_wait("NVML query failed")) << daemon.output();
  EXPECT_TRUE(eventually([&] {
    return daemon.metric("gpu_devwatch_checkpoint_remediation_held", {{"reason", "inventory-unconfirmed"}}) == 1;
  })) << daemon.output();
  std::this_thread::sleep_for(1500ms);
  EXPECT_FALSE(daemon.remediated()) << daemon.output();
  EXPECT_EQ(daemon.metric("gpu_devwatch_checkpoint_stale"), 1) << "stale, unconfirmed";
}

TEST_F(DaemonNodeHealth, AStaleCheckpointIsHeldWhileARunningContainerHoldsItsDevicesThenRemediated) {
  // Another boot's checkpoint (the node rebooted), still naming the devices of a container
  // that runs now.
  make_dirs(node_->proc_root() + "/sys/kernel/random");
  write_file(node_->proc_root() + "/sys/kernel/random/boot_id", random_uuid() + "\n");
  const auto* c = &node_->add_container({.pod_namespace = "ml", .pod_name = "p", .container_name = "c",
                                         .device_ids = {node_->gpu_uuid(0)}, .in_checkpoint = false});
  write_kubelet_checkpoint(*node_, {allocation(c->spec.pod_uid, "c", "nvidia.com/gpu", node_->gpu_uuid(0))},
                           {{"nvidia.com/gpu", {node_->gpu_uuid(0), node_->gpu_uuid(1)}}}, random_uuid());
  StaleCheckpointDaemon daemon(*node_, "  stale_confirm_after: 500ms\n");
  const auto started = std::chrono::steady_clock::now();
  ASSERT_TRUE(daemon.start()) << daemon.output();
  EXPECT_TRUE(eventually([&] { return daemon.metric("gpu_devwatch_checkpoint_stale") == 1; })) << daemon.output();
  EXPECT_TRUE(daemon.process_wait("checkpoint written in boot")) << daemon.output();

  // Confirmed after the window, but the container runs: held, said once, exported.
  EXPECT_TRUE(eventually([&] {
    return daemon.metric("gpu_devwatch_checkpoint_remediation_held", {{"reason", "devices-in-use"}}) == 1;
  })) << daemon.output();
  EXPECT_GE(std::chrono::steady_clock::now() - started, 500ms);
  EXPECT_NE(daemon.output().find("running containers hold devices it names (" + c->spec.pod_uid + "/c)"),
            std::string::npos)
      << daemon.output();
  std::this_thread::sleep_for(1500ms);  // several more checks
  EXPECT_FALSE(daemon.remediated()) << daemon.output();
  EXPECT_EQ(daemon.count("running containers hold devices it names"), 1u) << daemon.output();
  // Repairs go on from the record meanwhile.
  node_->reapply_spec(*c);
  EXPECT_TRUE(eventually([&] { return node_->open_errno(*c, "nvidia0") == ENXIO; }, 3s)) << daemon.output();

  // The container ends: at the next check the remediation runs. Moved aside (kept, never
  // deleted); the restart fails against a bus that does not exist.
  node_->remove_container(*c);
  c = nullptr;
  EXPECT_TRUE(eventually([&] {
    return daemon.metric("gpu_devwatch_checkpoint_remediations_total", {{"result", "error"}}) == 1;
  }, 10s)) << daemon.output();
  EXPECT_FALSE(std::filesystem::exists(node_->checkpoint_path()));
  EXPECT_TRUE(stale_copy_kept(*node_));
  EXPECT_EQ(daemon.metric("gpu_devwatch_checkpoint_remediation_held", {{"reason", "devices-in-use"}}), 0);
}

TEST_F(DaemonNodeHealth, AStaleCheckpointIsRemediatedOnlyAfterTheConfirmationWindow) {
  // An allocation of a GPU this host does not have (written before the instance was
  // replaced), for a pod that no longer runs.
  node_->allocate(random_uuid(), "old", {"GPU-deadbeef-0000-4000-8000-000000000000"});
  node_->write_checkpoint();
  StaleCheckpointDaemon daemon(*node_, "  stale_confirm_after: 2s\n");
  const auto started = std::chrono::steady_clock::now();
  ASSERT_TRUE(daemon.start()) << daemon.output();
  EXPECT_EQ(daemon.metric("gpu_devwatch_checkpoint_stale"), 1);
  EXPECT_EQ(daemon.metric("gpu_devwatch_checkpoint_unknown_devices"), 1);
  EXPECT_NE(daemon.output().find("GPU-deadbeef-0000-4000-8000-000000000000"), std::string::npos) << daemon.output();
  EXPECT_EQ(daemon.metric("gpu_devwatch_checkpoint_remediation_held", {{"reason", "awaiting-confirmation"}}), 1)
      << daemon.output();
  EXPECT_TRUE(std::filesystem::exists(node_->checkpoint_path())) << "remediated on one verdict";

  EXPECT_TRUE(eventually([&] {
    return daemon.metric("gpu_devwatch_checkpoint_remediations_total", {{"result", "error"}}) == 1;
  }, 10s)) << daemon.output();
  EXPECT_GE(std::chrono::steady_clock::now() - started, 2s);
  EXPECT_FALSE(std::filesystem::exists(node_->checkpoint_path()));
  EXPECT_TRUE(stale_copy_kept(*node_));
}

TEST_F(DaemonNodeHealth, AFreshCheckpointIsNotStaleAndNotTouched) {
  node_->add_container({.pod_name = "p", .container_name = "c", .device_ids = {node_->gpu_uuid(0)}});
  node_->write_checkpoint();
  ASSERT_TRUE(daemon_->start("", false, "  remediate_stale_checkpoint: true\n")) << daemon_->output();
  EXPECT_EQ(daemon_->metric("gpu_devwatch_checkpoint_stale"), 0);
  EXPECT_TRUE(std::filesystem::exists(node_->checkpoint_path()));
  EXPECT_EQ(daemon_->metric("gpu_devwatch_checkpoint_remediations_total"), -1);
}

}  // namespace
}  // namespace gdw::test
