// The daemon with its eBPF probe on the real kernel: repairs name who revoked, denied opens
// inside GPU containers are counted, and a probe that cannot load degrades to inotify.
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <sys/stat.h>
#include <sys/sysmacros.h>

#include <cerrno>
#include <map>
#include <thread>

#include "support/daemon_fixture.h"

namespace gdw::test {
namespace {


class DaemonWithProbe : public DaemonWithTrainerTest {
 protected:
  void start(const std::string& extra = "", const std::string& probe_extra = "") {
    ASSERT_TRUE(daemon_->start(extra, /*probe=*/true, "", probe_extra)) << daemon_->output();
    if (daemon_->metric("gpu_devwatch_probe_loaded") != 1)
      GTEST_SKIP() << "the eBPF probe could not load here:\n" << daemon_->output();
  }
};

TEST_F(DaemonWithProbe, TheRepairNamesTheWriter) {
  start();
  // A v1 node: rule writers are named at their permission check (the capability hook, 6.14+)
  // or, before 6.14, on the devices controller's write path (fexit, where the kernel allows
  // it); no program of the probe runs on the node's kmallocs.
  EXPECT_EQ(daemon_->metric("gpu_devwatch_probe_attach_hook_attached"), 0) << daemon_->output();
  EXPECT_EQ(daemon_->metric("gpu_devwatch_probe_rule_writers_degraded"), 0) << daemon_->output();
  if (daemon_->metric("gpu_devwatch_probe_capability_hook_attached") == 1) {
    EXPECT_TRUE(daemon_->process().wait_for_output("eBPF probe on a cgroup v1 node: rule writers named at the kernel's "
                                                   "permission check (capability hook); attach hook off"))
        << daemon_->output();
  } else {
    EXPECT_EQ(daemon_->metric("gpu_devwatch_probe_write_path_hook_attached"), 1) << daemon_->output();
    EXPECT_TRUE(daemon_->process().wait_for_output("eBPF probe on a cgroup v1 node: rule writers named on the devices "
                                                   "controller's write path (fexit/devcgroup_access_write"))
        << daemon_->output();
  }
  ASSERT_TRUE(SandboxNode::reapply_as_old_runc(*c_, "runc"));
  EXPECT_TRUE(daemon_->eventually_errno(*c_, "nvidia0", ENXIO)) << daemon_->output();
  EXPECT_TRUE(daemon_->process().wait_for_output("revoked by runc (pid")) << daemon_->output();
  EXPECT_NE(daemon_->output().find("writer=runc"), std::string::npos) << daemon_->output();
  EXPECT_GE(daemon_->metric("gpu_devwatch_revocations_total", {{"writer", "runc"}}), 1);
}

TEST_F(DaemonWithProbe, CheckSaysWhetherTheProbeIsLoaded) {
  // While the daemon runs, check sees its probe. (Other test runs may share this kernel,
  // so "not loaded" cannot be asserted reliably here.)
  start();
  auto r = run_command({GDW_BINARY, "check", "--config", daemon_->config_path()});
  EXPECT_NE(r.out.find("eBPF probe: loaded"), std::string::npos) << r.out;
}

TEST_F(DaemonWithProbe, AnUnknownWriterIsOtherWithItsExecutable) {
  start();
  ASSERT_TRUE(SandboxNode::reapply_as_old_runc(*c_, "fix-gpus.sh"));
  EXPECT_TRUE(daemon_->eventually_errno(*c_, "nvidia0", ENXIO)) << daemon_->output();
  EXPECT_TRUE(daemon_->process().wait_for_output("revoked by other (pid")) << daemon_->output();
  EXPECT_NE(daemon_->output().find("comm fix-gpus.sh"), std::string::npos) << daemon_->output();
  EXPECT_GE(daemon_->metric("gpu_devwatch_revocations_total", {{"writer", "other"}}), 1);
  EXPECT_EQ(daemon_->metric("gpu_devwatch_revocations_total", {{"writer", "runc"}}), -1);
}

TEST_F(DaemonWithProbe, DeniedOpensInsideAGpuContainerAreCounted) {
  start("mode: observe\n");  // leave it denied
  node_->reapply_spec(*c_);
  ASSERT_TRUE(eventually([&] { return daemon_->metric("gpu_devwatch_containers_missing_devices") == 1; }));
  // A device missing and not repaired: the syscall hook is attached to see the opens.
  ASSERT_TRUE(eventually([&] { return daemon_->metric("gpu_devwatch_probe_syscall_hook_attached") == 1; }))
      << daemon_->output();
  EXPECT_EQ(node_->open_errno(*c_, "nvidia0"), EPERM);
  EXPECT_TRUE(eventually([&] {
    return daemon_->metric("gpu_devwatch_denied_opens_total",
                           {{"namespace", "ml"}, {"pod", "trainer-0"}, {"container", "trainer"}, {"device", "nvidia0"}}) == 1;
  })) << daemon_->output() << daemon_->metrics();
  EXPECT_TRUE(daemon_->process().wait_for_output("denied (EPERM)")) << daemon_->output();
  // Another denied device (a copy of /dev/null's numbers) is not a GPU open: counted as
  // other, in the kernel, without the daemon looking its path up.
  const std::string null_copy = node_->node_path("null-copy");
  ASSERT_EQ(::mknod(null_copy.c_str(), S_IFCHR | 0666, makedev(1, 3)), 0);
  node_->cgroups().deny(c_->cgroup_rel, "c 1:3 rwm");
  EXPECT_EQ(node_->cgroups().open_errno(c_->cgroup_rel, null_copy), EPERM);
  EXPECT_TRUE(eventually([&] {
    return daemon_->metric("gpu_devwatch_denied_opens_total",
                           {{"namespace", "ml"}, {"pod", "trainer-0"}, {"container", "trainer"}, {"device", "other"}}) == 1;
  })) << daemon_->metrics();
  EXPECT_EQ(daemon_->metric("gpu_devwatch_denied_opens_total"), 2) << daemon_->metrics();
}

std::map<std::string, std::string> trainer_labels(const std::string& device) {
  return {{"namespace", "ml"}, {"pod", "trainer-0"}, {"container", "trainer"}, {"device", device}};
}

TEST_F(DaemonWithProbe, TheSyscallHookIsAttachedOnlyWhileADeviceIsMissingAndForTheLinger) {
  start("mode: observe\n", "  syscall_hook: on-drift\n  syscall_hook_linger: 1s\n");
  EXPECT_EQ(daemon_->metric("gpu_devwatch_probe_syscall_hook_attached"), 0) << "nothing missing: not attached";
  // nvidia1 belongs to no container here: its EPERM is not seen while the hook is off.
  EXPECT_EQ(node_->open_errno(*c_, "nvidia1"), EPERM);

  node_->reapply_spec(*c_);
  ASSERT_TRUE(eventually([&] { return daemon_->metric("gpu_devwatch_probe_syscall_hook_attached") == 1; }))
      << daemon_->output();
  EXPECT_TRUE(daemon_->process().wait_for_output("probe syscall hook attached (a GPU container is missing devices)"))
      << daemon_->output();
  EXPECT_EQ(node_->open_errno(*c_, "nvidia0"), EPERM);
  EXPECT_TRUE(eventually([&] { return daemon_->metric("gpu_devwatch_denied_opens_total", trainer_labels("nvidia0")) == 1; }))
      << daemon_->metrics();
  EXPECT_EQ(daemon_->metric("gpu_devwatch_denied_opens_total", trainer_labels("other")), -1)
      << "the open before the hook was attached was counted";

  // Someone else grants it back: whole again, the hook lingers, then goes.
  for (const char* rule : {"c 195:0 rw", "c 195:255 rw", "c 237:0 rw", "c 237:1 rw"})
    ASSERT_EQ(node_->cgroups().allow(c_->cgroup_rel, rule), 0) << rule;
  ASSERT_TRUE(eventually([&] { return daemon_->metric("gpu_devwatch_containers_missing_devices") == 0; }))
      << daemon_->output();
  const auto healed = std::chrono::steady_clock::now();
  EXPECT_EQ(daemon_->metric("gpu_devwatch_probe_syscall_hook_attached"), 1) << "detached before the linger";
  ASSERT_TRUE(eventually([&] { return daemon_->metric("gpu_devwatch_probe_syscall_hook_attached") == 0; }))
      << daemon_->output();
  EXPECT_GE(std::chrono::steady_clock::now() - healed, std::chrono::milliseconds(700));
  EXPECT_TRUE(daemon_->process().wait_for_output("probe syscall hook detached (no GPU container is missing devices)"))
      << daemon_->output();
  EXPECT_EQ(node_->open_errno(*c_, "nvidia1"), EPERM);
  std::this_thread::sleep_for(std::chrono::milliseconds(200));
  EXPECT_EQ(daemon_->metric("gpu_devwatch_denied_opens_total", trainer_labels("other")), -1)
      << "an open after the hook was detached was counted";
}

TEST_F(DaemonWithProbe, ARepairedRevocationNeverAttachesTheSyscallHook) {
  start();
  ASSERT_TRUE(SandboxNode::reapply_as_old_runc(*c_, "runc"));
  EXPECT_TRUE(daemon_->eventually_errno(*c_, "nvidia0", ENXIO)) << daemon_->output();
  // Named at the permission check, without the hook.
  EXPECT_TRUE(daemon_->process().wait_for_output("revoked by runc (pid")) << daemon_->output();
  EXPECT_EQ(daemon_->metric("gpu_devwatch_probe_syscall_hook_attached"), 0);
  EXPECT_EQ(daemon_->output().find("probe syscall hook attached"), std::string::npos) << daemon_->output();
}

TEST_F(DaemonWithProbe, SyscallHookAlwaysAndOff) {
  start("", "  syscall_hook: always\n");
  EXPECT_EQ(daemon_->metric("gpu_devwatch_probe_syscall_hook_attached"), 1);
  EXPECT_EQ(node_->open_errno(*c_, "nvidia1"), EPERM);  // not this container's GPU
  EXPECT_TRUE(eventually([&] { return daemon_->metric("gpu_devwatch_denied_opens_total", trainer_labels("other")) == 1; }))
      << daemon_->metrics();
  auto r = run_command({GDW_BINARY, "check", "--config", daemon_->config_path()});
  EXPECT_NE(r.out.find("syscall hook attached"), std::string::npos) << r.out;
  daemon_->stop();

  auto off = std::make_unique<DaemonHarness>(*node_);
  ASSERT_TRUE(off->start("mode: observe\n", /*probe=*/true, "", "  syscall_hook: off\n")) << off->output();
  node_->reapply_spec(*c_);
  ASSERT_TRUE(eventually([&] { return off->metric("gpu_devwatch_containers_missing_devices") == 1; }));
  EXPECT_EQ(node_->open_errno(*c_, "nvidia0"), EPERM);
  std::this_thread::sleep_for(std::chrono::milliseconds(200));
  EXPECT_EQ(off->metric("gpu_devwatch_probe_syscall_hook_attached"), 0);
  EXPECT_EQ(off->metric("gpu_devwatch_denied_opens_total", trainer_labels("nvidia0")), -1);
}

TEST(DaemonWithoutProbe, WithoutBpfCapabilitiesItWarnsOnceAndKeepsWatching) {
  if (!SandboxNode::available()) GTEST_SKIP() << "needs root and a writable cgroup v1 devices hierarchy";
  SandboxNode node;
  const auto& c = node.add_container({.pod_namespace = "ml", .pod_name = "p", .container_name = "c",
                                      .device_ids = {node.gpu_uuid(1)}});
  node.write_checkpoint();
  const int port = free_port();
  const std::string config = node.write_config("metrics:\n  listen: 127.0.0.1:" + std::to_string(port) +
                                               "\nprobe:\n  enabled: true\n");
  // A daemon started without CAP_BPF, CAP_PERFMON and CAP_SYS_ADMIN: the probe cannot load.
  // (Device cgroup writes need CAP_SYS_ADMIN too, so its grants are refused: what remains to
  // prove is that it runs on, watching through inotify, and says why the probe is off.)
  BackgroundProcess daemon({"setpriv", "--bounding-set=-bpf,-perfmon,-sys_admin", GDW_BINARY, "run", "--config", config});
  ASSERT_TRUE(daemon.wait_for_output(" ready")) << daemon.output();
  std::string metrics;
  ASSERT_TRUE(eventually([&] { return !(metrics = http_get(port)).empty(); }));
  EXPECT_EQ(metric_value(metrics, "gpu_devwatch_probe_loaded"), 0);
  const std::string out = daemon.output();
  const auto warning = out.find("eBPF probe not loaded, continuing on inotify alone");
  ASSERT_NE(warning, std::string::npos) << out;
  EXPECT_NE(out.find("CAP_BPF", warning), std::string::npos) << "the warning names the reason\n" << out;
  EXPECT_EQ(out.find("eBPF probe not loaded", warning + 1), std::string::npos) << "warned once";

  node.reapply_spec(c);
  EXPECT_TRUE(eventually([&] {
    return metric_value(http_get(port), "gpu_devwatch_drift_total", {{"device", "nvidia1"}}).value_or(0) >= 1;
  })) << daemon.output();
  EXPECT_TRUE(daemon.running());
  daemon.signal(SIGTERM);
  EXPECT_EQ(daemon.wait(std::chrono::seconds(10)), 0);
}

TEST(DaemonWithoutProbe, AConfigKeyTurnsItOff) {
  if (!SandboxNode::available()) GTEST_SKIP() << "needs root and a writable cgroup v1 devices hierarchy";
  SandboxNode node;
  DaemonHarness daemon(node);
  ASSERT_TRUE(daemon.start("", /*probe=*/false)) << daemon.output();
  EXPECT_EQ(daemon.metric("gpu_devwatch_probe_loaded"), 0);
  EXPECT_EQ(daemon.output().find("eBPF probe not loaded"), std::string::npos) << "off by choice is not a warning";
}

}  // namespace
}  // namespace gdw::test
