// `gpu-devwatch run` on the real kernel: the revokers' write patterns against real v1
// device cgroups; access proven with open() from a process inside the container's cgroup,
// and the daemon's /metrics checked.
#include <gtest/gtest.h>
#include <signal.h>

#include <cerrno>
#include <fstream>
#include <thread>

#include "support/daemon_fixture.h"

namespace gdw::test {
namespace {

class DaemonOnRealCgroups : public DaemonTest {
 protected:
  // A daemon that got to "ready" must also exit cleanly on SIGTERM.
  void TearDown() override {
    if (daemon_) {
      bool was_running = daemon_->output().find(" ready") != std::string::npos;
      int code = daemon_->stop();
      if (was_running) {
        EXPECT_EQ(code, 0) << "daemon did not exit cleanly on SIGTERM\n" << daemon_->output();
      }
    }
  }
  const SandboxContainer& gpu_container(const std::string& name, int gpu, bool uvm = true) {
    return node_->add_container({.pod_namespace = "ml", .pod_name = name + "-0", .container_name = name,
                                 .device_ids = {node_->gpu_uuid(gpu)}, .hook_grants_uvm = uvm});
  }
  std::map<std::string, std::string> labels(const SandboxContainer& c, const std::string& device = "") {
    std::map<std::string, std::string> l{{"namespace", c.spec.pod_namespace}, {"pod", c.spec.pod_name},
                                         {"container", c.spec.container_name}};
    if (!device.empty()) l["device"] = device;
    return l;
  }
};

TEST_F(DaemonOnRealCgroups, OldRuncReapplyIsRepaired) {
  const auto& c = gpu_container("trainer", 0);
  node_->write_checkpoint();
  ASSERT_TRUE(daemon_->start()) << daemon_->output();
  EXPECT_EQ(daemon_->metric("gpu_devwatch_containers_watched"), 1);

  node_->reapply_spec(c);  // deny `a`, then the spec's allows: the GPU is gone
  EXPECT_TRUE(daemon_->eventually_errno(c, "nvidia0", ENXIO)) << daemon_->output();
  EXPECT_EQ(node_->open_errno(c, "nvidia-uvm"), ENXIO);
  EXPECT_EQ(node_->open_errno(c, "nvidiactl"), ENXIO);
  EXPECT_EQ(node_->open_errno(c, "nvidia1"), EPERM) << "never more than the allocation";

  EXPECT_TRUE(eventually([&] { return daemon_->metric("gpu_devwatch_drift_total", labels(c, "nvidia0")) >= 1; }));
  EXPECT_TRUE(daemon_->eventually_metric_at_least("gpu_devwatch_regrants_total", 1, {{"result", "success"}}));
  EXPECT_EQ(daemon_->metric("gpu_devwatch_regrants_total", {{"result", "error"}}), -1);
  EXPECT_TRUE(daemon_->eventually_metric_at_least("gpu_devwatch_repair_duration_seconds_count", 1));
  EXPECT_EQ(daemon_->metric("gpu_devwatch_containers_missing_devices"), 0);
  EXPECT_EQ(daemon_->metric("gpu_devwatch_checkpoint_checksum_valid"), 1);
  // Info lines reach stderr in batches, up to 5 ms after the repair (log/held_lines_sink.h).
  EXPECT_TRUE(daemon_->process().wait_for_output("granted back nvidia0")) << daemon_->output();
}

TEST_F(DaemonOnRealCgroups, Runc1_0_0rc9xMinimalDenyIsRepaired) {
  const auto& c = gpu_container("trainer", 1);
  node_->write_checkpoint();
  ASSERT_TRUE(daemon_->start()) << daemon_->output();
  // runc ≥ rc91 re-applying: one explicit deny of the out-of-band rule.
  ASSERT_EQ(node_->cgroups().deny(c.cgroup_rel, "c 195:1 rw"), 0);
  EXPECT_TRUE(daemon_->eventually_errno(c, "nvidia1", ENXIO)) << daemon_->output();
}

TEST_F(DaemonOnRealCgroups, SystemdV1ReapplyIsRepaired) {
  const auto& c = gpu_container("trainer", 0);
  node_->write_checkpoint();
  ASSERT_TRUE(daemon_->start()) << daemon_->output();
  // systemd (cgroup v1, systemd driver) on daemon-reload: deny `a`, its static list, then
  // the unit's DeviceAllow= entries.
  ASSERT_EQ(node_->cgroups().deny(c.cgroup_rel, "a"), 0);
  for (const char* rule : {"c 1:3 rwm", "c 1:5 rwm", "c 1:7 rwm", "c 1:8 rwm", "c 1:9 rwm", "c 5:0 rwm",
                           "c 5:2 rwm", "c 136:* rw", "c 10:200 rwm", "c 5:1 rwm"})
    node_->cgroups().allow(c.cgroup_rel, rule);
  EXPECT_TRUE(daemon_->eventually_errno(c, "nvidia0", ENXIO)) << daemon_->output();
  EXPECT_EQ(node_->open_errno(c, "nvidia-uvm"), ENXIO);
}

TEST_F(DaemonOnRealCgroups, ContainerCreatedWithoutUvmIsGrantedWhenItAppears) {
  ASSERT_TRUE(daemon_->start()) << daemon_->output();
  // kubelet records the allocation first, then the runtime creates the container.
  SandboxContainerSpec spec{.pod_namespace = "ml", .pod_name = "infer-0", .container_name = "server",
                            .device_ids = {node_->gpu_uuid(1)}, .hook_grants_uvm = false};
  spec.pod_uid = random_uuid();
  const auto& c = node_->add_container(spec);  // pre-allocating the checkpoint entry needs the pod UID
  node_->write_checkpoint();
  EXPECT_TRUE(daemon_->eventually_errno(c, "nvidia-uvm", ENXIO)) << daemon_->output();
  EXPECT_EQ(node_->open_errno(c, "nvidia-uvm-tools"), ENXIO);
  EXPECT_EQ(node_->open_errno(c, "nvidia0"), EPERM);
}

TEST_F(DaemonOnRealCgroups, CheckpointReplacedByRenameBringsANewPodUnderWatch) {
  ASSERT_TRUE(daemon_->start()) << daemon_->output();
  const auto& c = gpu_container("late", 0);
  // The container exists before its allocation is known: not watched yet.
  EXPECT_TRUE(eventually([&] { return daemon_->output().find(c.cgroup_dir) == std::string::npos; }, 200ms));
  node_->write_checkpoint();  // temp file + rename, as kubelet does
  EXPECT_TRUE(eventually([&] { return daemon_->metric("gpu_devwatch_containers_watched") == 1; })) << daemon_->output();
  node_->reapply_spec(c);
  EXPECT_TRUE(daemon_->eventually_errno(c, "nvidia0", ENXIO)) << daemon_->output();
}

TEST_F(DaemonOnRealCgroups, DeletedPodsLeaveNoSeries) {
  const auto& a = gpu_container("a", 0);
  const auto& b = gpu_container("b", 1);
  node_->write_checkpoint();
  ASSERT_TRUE(daemon_->start()) << daemon_->output();
  node_->reapply_spec(a);
  node_->reapply_spec(b);
  ASSERT_TRUE(daemon_->eventually_errno(a, "nvidia0", ENXIO));
  ASSERT_TRUE(daemon_->eventually_errno(b, "nvidia1", ENXIO));
  ASSERT_TRUE(eventually([&] { return daemon_->metric("gpu_devwatch_drift_total", labels(a)) >= 1; }));
  const auto a_labels = labels(a);
  node_->remove_container(a);
  EXPECT_TRUE(eventually([&] { return daemon_->metric("gpu_devwatch_containers_watched") == 1; })) << daemon_->output();
  EXPECT_EQ(daemon_->metric("gpu_devwatch_drift_total", a_labels), -1) << daemon_->metrics();
  EXPECT_GE(daemon_->metric("gpu_devwatch_drift_total", labels(b)), 1);
}

TEST_F(DaemonOnRealCgroups, ContainerWithoutGpusIsNeverTouched) {
  const auto& gpu = gpu_container("gpu", 0);
  const auto& plain = node_->add_container({.pod_name = "web-0", .container_name = "web"});
  node_->write_checkpoint();
  ASSERT_TRUE(daemon_->start()) << daemon_->output();
  node_->reapply_spec(plain);
  node_->reapply_spec(gpu);
  ASSERT_TRUE(daemon_->eventually_errno(gpu, "nvidia0", ENXIO));
  const std::string before = node_->cgroups().devices_list(plain.cgroup_rel);
  std::this_thread::sleep_for(100ms);
  EXPECT_EQ(node_->cgroups().devices_list(plain.cgroup_rel), before);
  EXPECT_EQ(node_->open_errno(plain, "nvidia0"), EPERM);
  EXPECT_EQ(node_->open_errno(plain, "nvidia-uvm"), EPERM);
}

TEST_F(DaemonOnRealCgroups, ObserveModeReportsButNeverWrites) {
  const auto& c = gpu_container("trainer", 0);
  node_->write_checkpoint();
  ASSERT_TRUE(daemon_->start("mode: observe\n")) << daemon_->output();
  node_->reapply_spec(c);
  EXPECT_TRUE(eventually([&] { return daemon_->metric("gpu_devwatch_containers_missing_devices") == 1; }))
      << daemon_->output();
  EXPECT_EQ(daemon_->metric("gpu_devwatch_drift_total", labels(c, "nvidia0")), 1);
  EXPECT_EQ(node_->open_errno(c, "nvidia0"), EPERM);
  EXPECT_EQ(daemon_->metric("gpu_devwatch_regrants_total"), -1);
  EXPECT_NE(daemon_->output().find("observe mode"), std::string::npos);
}

TEST_F(DaemonOnRealCgroups, SighupWithABadConfigKeepsTheRunningOne) {
  const auto& c = gpu_container("trainer", 0);
  node_->write_checkpoint();
  ASSERT_TRUE(daemon_->start()) << daemon_->output();
  const std::string good = read_file(daemon_->config_path());
  write_file(daemon_->config_path(), good + "bogus_key: 1\n");
  daemon_->process().signal(SIGHUP);
  EXPECT_TRUE(eventually([&] { return daemon_->metric("gpu_devwatch_config_reloads_total", {{"result", "error"}}) == 1; }));
  EXPECT_NE(daemon_->output().find("keeping the running configuration"), std::string::npos) << daemon_->output();
  EXPECT_NE(daemon_->output().find("unknown key 'bogus_key'"), std::string::npos);
  node_->reapply_spec(c);
  EXPECT_TRUE(daemon_->eventually_errno(c, "nvidia0", ENXIO)) << "still repairing after a bad reload";

  write_file(daemon_->config_path(), good + "mode: observe\n");
  daemon_->process().signal(SIGHUP);
  EXPECT_TRUE(eventually([&] { return daemon_->metric("gpu_devwatch_config_reloads_total", {{"result", "success"}}) == 1; }));
  node_->reapply_spec(c);
  std::this_thread::sleep_for(200ms);
  EXPECT_EQ(node_->open_errno(c, "nvidia0"), EPERM) << "the reloaded observe mode is in force";
}

TEST_F(DaemonOnRealCgroups, InotifyOverflowEndsInTheRightState) {
  const auto& busy = gpu_container("busy", 0);
  const auto& victim = gpu_container("victim", 1);
  node_->write_checkpoint();
  ASSERT_TRUE(daemon_->start()) << daemon_->output();
  // Freeze the daemon (our own child) so its inotify queue fills past max_queued_events.
  daemon_->process().signal(SIGSTOP);
  std::ifstream max_file("/proc/sys/fs/inotify/max_queued_events");
  int max_events = 16384;
  max_file >> max_events;
  // Alternate watched files (the containers' devices.deny) so the kernel cannot merge
  // consecutive identical events.
  for (int i = 0; i < max_events / 2 + 100; ++i) {
    node_->cgroups().deny(busy.cgroup_rel, "c 1:9 rwm");
    node_->cgroups().deny(victim.cgroup_rel, "c 1:9 rwm");
  }
  node_->reapply_spec(victim);
  node_->reapply_spec(busy);
  daemon_->process().signal(SIGCONT);
  EXPECT_TRUE(eventually([&] { return daemon_->metric("gpu_devwatch_inotify_overflows_total") >= 1; }, 10s))
      << daemon_->output();
  EXPECT_TRUE(daemon_->eventually_errno(victim, "nvidia1", ENXIO)) << daemon_->output();
  EXPECT_TRUE(daemon_->eventually_errno(busy, "nvidia0", ENXIO));
  EXPECT_GE(daemon_->metric("gpu_devwatch_resyncs_total", {{"reason", "overflow"}}), 1);
  // Watches survive the overflow: a later revocation is still repaired.
  node_->reapply_spec(victim);
  EXPECT_TRUE(daemon_->eventually_errno(victim, "nvidia-uvm", ENXIO));
}

TEST_F(DaemonOnRealCgroups, ARefusedGrantIsCountedAndNotRetriedInAHotLoop) {
  const auto& c = gpu_container("trainer", 0);
  node_->write_checkpoint();
  ASSERT_TRUE(daemon_->start("repair:\n  rejected_backoff: 1h\n")) << daemon_->output();
  const std::string pod_rel = c.cgroup_rel.substr(0, c.cgroup_rel.rfind('/'));
  ASSERT_EQ(node_->cgroups().deny(pod_rel, "c 195:0 rwm"), 0);  // the parent now denies the GPU
  node_->reapply_spec(c);
  EXPECT_TRUE(eventually([&] { return daemon_->metric("gpu_devwatch_regrants_total", {{"result", "error"}}) >= 1; }))
      << daemon_->output();
  std::this_thread::sleep_for(300ms);
  const double errors = daemon_->metric("gpu_devwatch_regrants_total", {{"result", "error"}});
  for (int i = 0; i < 5; ++i) node_->reapply_spec(c);  // within repair.burst: no rate limit
  std::this_thread::sleep_for(300ms);
  EXPECT_EQ(daemon_->metric("gpu_devwatch_regrants_total", {{"result", "error"}}), errors)
      << "refused grants are retried only after repair.rejected_backoff";
  const std::string out = daemon_->output();
  std::size_t logged = 0;
  for (auto pos = out.find("cannot grant nvidia0"); pos != std::string::npos; pos = out.find("cannot grant nvidia0", pos + 1))
    ++logged;
  EXPECT_EQ(logged, 1u) << out;
  // The other devices were granted all the same.
  EXPECT_TRUE(daemon_->eventually_errno(c, "nvidia-uvm", ENXIO));
  EXPECT_EQ(node_->open_errno(c, "nvidia0"), EPERM);
}

TEST_F(DaemonOnRealCgroups, ARepeatedRevokerIsRateLimitedButStillRepaired) {
  const auto& c = gpu_container("trainer", 0);
  node_->write_checkpoint();
  ASSERT_TRUE(daemon_->start("repair:\n  burst: 3\n  max_per_minute: 600\n")) << daemon_->output();
  // Further apart than repair.apply_quiet (5 ms): without the probe no writer is named, and
  // re-applies closer together are repaired once, when they go quiet.
  for (int i = 0; i < 30; ++i) {
    node_->reapply_spec(c);
    std::this_thread::sleep_for(10ms);
  }
  EXPECT_TRUE(eventually([&] { return daemon_->metric("gpu_devwatch_repairs_throttled_total", labels(c)) >= 1; }))
      << daemon_->output();
  EXPECT_NE(daemon_->output().find("rate-limited"), std::string::npos);
  EXPECT_NE(daemon_->output().find(c.cgroup_dir), std::string::npos) << "the log names the cgroup";
  // Rate-limited, not abandoned: the last revocation is repaired within a token interval.
  EXPECT_TRUE(daemon_->eventually_errno(c, "nvidia0", ENXIO, 3s)) << daemon_->output();
}

// The defaults: a re-applier at 200/s is repaired every time and never held back; the
// journal gets repair.log_burst lines, then one per repair.log_interval counting the rest.
TEST_F(DaemonOnRealCgroups, AReapplierAt200PerSecondIsNeverHeldBackAndItsLogIsCounted) {
  const auto& c = gpu_container("trainer", 0);
  node_->write_checkpoint();
  // The probe on, as by default: it names the writer (this test, no runtime), so no
  // re-apply waits for the writes to go quiet (5 ms apart here).
  ASSERT_TRUE(daemon_->start("repair:\n  log_burst: 3\n  log_interval: 1s\n", /*probe=*/true)) << daemon_->output();
  const auto start = std::chrono::steady_clock::now();
  int reapplies = 0;
  for (auto next = start; next < start + 2s; next += 5ms, ++reapplies) {
    std::this_thread::sleep_until(next);
    node_->reapply_spec(c);
  }
  EXPECT_TRUE(daemon_->eventually_errno(c, "nvidia0", ENXIO)) << daemon_->output();
  EXPECT_TRUE(eventually([&] { return daemon_->output().find("more repairs in the last") != std::string::npos; }, 3s))
      << "the repairs not logged are counted\n" << daemon_->output();
  EXPECT_GE(daemon_->metric("gpu_devwatch_regrants_total", {{"result", "success"}}), reapplies / 4) << reapplies;
  EXPECT_LE(daemon_->metric("gpu_devwatch_repairs_throttled_total", labels(c)), 0) << "the guard never engaged";
  EXPECT_EQ(daemon_->metric("gpu_devwatch_containers_throttled"), 0);
  const std::string out = daemon_->output();
  EXPECT_EQ(out.find("rate-limited"), std::string::npos) << out;
  std::size_t lines = 0;
  for (auto pos = out.find("granted back nvidia0"); pos != std::string::npos; pos = out.find("granted back nvidia0", pos + 1))
    ++lines;
  EXPECT_GE(lines, 3u) << out;
  EXPECT_LE(lines, 3u + 3u) << "3 at first, then one a second\n" << out;
}

}  // namespace
}  // namespace gdw::test
