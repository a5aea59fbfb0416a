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

#include "support/daemon_fixture.h"

namespace gdw::test {
namespace {


// The daemon with its probe on a node with no allocations yet (skipped where the probe
// cannot load), and the newest container start it has seen so far.
class DaemonPendingAttribution : public DaemonTest {
 protected:
  void SetUp() override {
    DaemonTest::SetUp();
    if (!set_up()) return;
    node_->write_checkpoint();  // no allocations yet
    ASSERT_TRUE(daemon_->start("", /*probe=*/true)) << daemon_->output();
    if (daemon_->metric("gpu_devwatch_probe_loaded") != 1)
      GTEST_SKIP() << "the eBPF probe could not load here:\n" << daemon_->output();
    started_before_ = newest_start();
  }
  double newest_start() const { return daemon_->metric("gpu_devwatch_newest_container_start_timestamp_seconds"); }
  // The late allocation record: `c` becomes a GPU container holding GPU 0, which the
  // daemon then grants back.
  void allocate_gpu0_and_expect_it_granted(const SandboxContainer& c) {
    node_->allocate(c.spec.pod_uid, c.spec.container_name, {node_->gpu_uuid(0)});
    node_->write_checkpoint();
    EXPECT_TRUE(daemon_->eventually_errno(c, "nvidia0", ENXIO)) << daemon_->output();
  }
  double started_before_ = 0;
};

TEST_F(DaemonPendingAttribution, ARevocationBeforeTheAllocationRecordIsNamedAtTheFirstRepair) {
  // Created after READY; kubelet's checkpoint does not record it yet.
  const auto& c = node_->add_container({.pod_namespace = "ml", .pod_name = "late-0", .container_name = "late",
                                        .device_ids = {node_->gpu_uuid(0)}, .in_checkpoint = false});
  ASSERT_EQ(node_->open_errno(c, "nvidia0"), ENXIO) << "the hook granted the GPU at creation";
  // The daemon has seen the cgroup (not as a GPU container: no allocation names it).
  ASSERT_TRUE(eventually([&] { return newest_start() > started_before_; })) << daemon_->output();
  EXPECT_EQ(daemon_->metric("gpu_devwatch_containers_watched"), 0) << daemon_->output();

  ASSERT_TRUE(SandboxNode::reapply_as_old_runc(c, "runc"));
  ASSERT_EQ(node_->open_errno(c, "nvidia0"), EPERM);
  std::this_thread::sleep_for(std::chrono::milliseconds(300));  // the record is late
  EXPECT_EQ(node_->open_errno(c, "nvidia0"), EPERM) << "not a GPU container yet: nothing to repair";

  allocate_gpu0_and_expect_it_granted(c);
  EXPECT_TRUE(daemon_->process().wait_for_output("revoked by runc (pid", std::chrono::seconds(3))) << daemon_->output();
  EXPECT_NE(daemon_->output().find("writer=runc"), std::string::npos) << daemon_->output();
  EXPECT_TRUE(eventually([&] {
    return daemon_->metric("gpu_devwatch_revocations_total", {{"writer", "runc"}}) >= 1;
  }, std::chrono::seconds(2))) << daemon_->metrics() << daemon_->output();
  EXPECT_EQ(daemon_->stop(), 0) << daemon_->output();
}

// A write to such a container that revokes nothing it will want (a deny of /dev/null) is
// not named when it becomes a GPU container whose own devices were taken by someone the
// probe did not see.
TEST_F(DaemonPendingAttribution, AWriteThatExplainsNothingMissingIsNotNamed) {
  const auto& c = node_->add_container({.pod_namespace = "ml", .pod_name = "late-1", .container_name = "late",
                                        .device_ids = {node_->gpu_uuid(0)}, .hook_grants_gpu = false,
                                        .in_checkpoint = false});
  ASSERT_TRUE(eventually([&] { return newest_start() > started_before_; })) << daemon_->output();
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
  ASSERT_EQ(node_->open_errno(c, "nvidia0"), EPERM) << "never granted";
  allocate_gpu0_and_expect_it_granted(c);
  EXPECT_TRUE(daemon_->process().wait_for_output("granted back nvidia0", std::chrono::seconds(3))) << daemon_->output();
  EXPECT_EQ(daemon_->output().find("revoked by runc"), std::string::npos) << daemon_->output();
  EXPECT_EQ(daemon_->metric("gpu_devwatch_revocations_total", {{"writer", "runc"}}), -1) << daemon_->metrics();
  EXPECT_EQ(daemon_->stop(), 0) << daemon_->output();
}

}  // namespace
}  // namespace gdw::test
