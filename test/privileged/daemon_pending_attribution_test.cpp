// Attribution from READY on, for containers that are not yet known as GPU containers: a
// container created after READY and revoked before its allocation record arrives (the
// checkpoint is rewritten a moment later) is repaired once it is known, and the repair
// names the writer (log line and gpu_devwatch_revocations_total), as for any other GPU
// container. The daemon keeps deny-rule writes to such containers, bounded in number and
// age (core/revocation.h), until their first repair adopts the one that explains it.
#include <gtest/gtest.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <thread>

#include "support/daemon_harness.h"

namespace gdw::test {
namespace {


TEST(DaemonPendingAttribution, ARevocationBeforeTheAllocationRecordIsNamedAtTheFirstRepair) {
  if (!SandboxNode::available()) GTEST_SKIP() << "needs root and a writable cgroup v1 devices hierarchy";
  SandboxNode node;
  node.write_checkpoint();  // no allocations yet
  DaemonHarness daemon(node);
  ASSERT_TRUE(daemon.start("", /*probe=*/true)) << daemon.output();
  if (daemon.metric("gpu_devwatch_probe_loaded") != 1)
    GTEST_SKIP() << "the eBPF probe could not load here:\n" << daemon.output();
  const double started_before = daemon.metric("gpu_devwatch_newest_container_start_timestamp_seconds");

  // Created after READY; kubelet's checkpoint does not record it yet.
  const auto& c = node.add_container({.pod_namespace = "ml", .pod_name = "late-0", .container_name = "late",
                                      .device_ids = {node.gpu_uuid(0)}, .in_checkpoint = false});
  ASSERT_EQ(node.open_errno(c, "nvidia0"), ENXIO) << "the hook granted the GPU at creation";
  // The daemon has seen the cgroup (not as a GPU container: no allocation names it).
  ASSERT_TRUE(eventually([&] {
    return daemon.metric("gpu_devwatch_newest_container_start_timestamp_seconds") > started_before;
  })) << daemon.output();
  EXPECT_EQ(daemon.metric("gpu_devwatch_containers_watched"), 0) << daemon.output();

  ASSERT_TRUE(SandboxNode::reapply_as_old_runc(c, "runc"));
  ASSERT_EQ(node.open_errno(c, "nvidia0"), EPERM);
  std::this_thread::sleep_for(std::chrono::milliseconds(300));  // the record is late
  EXPECT_EQ(node.open_errno(c, "nvidia0"), EPERM) << "not a GPU container yet: nothing to repair";

  node.allocate(c.spec.pod_uid, c.spec.container_name, {node.gpu_uuid(0)});
  node.write_checkpoint();
  EXPECT_TRUE(daemon.eventually_errno(c, "nvidia0", ENXIO)) << daemon.output();
  EXPECT_TRUE(daemon.process().wait_for_output("revoked by runc (pid", std::chrono::seconds(3))) << daemon.output();
  EXPECT_NE(daemon.output().find("writer=runc"), std::string::npos) << daemon.output();
  EXPECT_TRUE(eventually([&] {
    return daemon.metric("gpu_devwatch_revocations_total", {{"writer", "runc"}}) >= 1;
  }, std::chrono::seconds(2))) << daemon.metrics() << daemon.output();
  EXPECT_EQ(daemon.stop(), 0) << daemon.output();
}

// A write to such a container that revokes nothing it will want (a deny of /dev/null) is
// not named when it becomes a GPU container whose own devices were taken by someone the
// probe did not see.
TEST(DaemonPendingAttribution, AWriteThatExplainsNothingMissingIsNotNamed) {
  if (!SandboxNode::available()) GTEST_SKIP() << "needs root and a writable cgroup v1 devices hierarchy";
  SandboxNode node;
  node.write_checkpoint();
  DaemonHarness daemon(node);
  ASSERT_TRUE(daemon.start("", /*probe=*/true)) << daemon.output();
  if (daemon.metric("gpu_devwatch_probe_loaded") != 1)
    GTEST_SKIP() << "the eBPF probe could not load here:\n" << daemon.output();
  const double started_before = daemon.metric("gpu_devwatch_newest_container_start_timestamp_seconds");
  const auto& c = node.add_container({.pod_namespace = "ml", .pod_name = "late-1", .container_name = "late",
                                      .device_ids = {node.gpu_uuid(0)}, .hook_grants_gpu = false,
                                      .in_checkpoint = false});
  ASSERT_TRUE(eventually([&] {
    return daemon.metric("gpu_devwatch_newest_container_start_timestamp_seconds") > started_before;
  })) << daemon.output();
  {
    const pid_t pid = ::fork();
    ASSERT_GE(pid, 0);
    if (pid == 0) {
      ::prctl(PR_SET_NAME, "runc");
      const int fd = ::open((c.cgroup_dir + "/devices.deny").c_str(), O_WRONLY);
      _exit(fd >= 0 && ::write(fd, "c 1:3 rwm", 9) == 9 ? 0 : 1);
    }
    int status = 0;
    ::waitpid(pid, &status, 0);
    ASSERT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0);
  }
  ASSERT_EQ(node.open_errno(c, "nvidia0"), EPERM) << "never granted";
  node.allocate(c.spec.pod_uid, c.spec.container_name, {node.gpu_uuid(0)});
  node.write_checkpoint();
  EXPECT_TRUE(daemon.eventually_errno(c, "nvidia0", ENXIO)) << daemon.output();
  EXPECT_TRUE(daemon.process().wait_for_output("granted back nvidia0", std::chrono::seconds(3))) << daemon.output();
  EXPECT_EQ(daemon.output().find("revoked by runc"), std::string::npos) << daemon.output();
  EXPECT_EQ(daemon.metric("gpu_devwatch_revocations_total", {{"writer", "runc"}}), -1) << daemon.metrics();
  EXPECT_EQ(daemon.stop(), 0) << daemon.output();
}

}  // namespace
}  // namespace gdw::test
