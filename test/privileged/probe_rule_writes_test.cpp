// The eBPF probe on the real kernel, cgroup v1: rule writes to devices.allow / devices.deny
// seen at the kernel's permission check and at syscall exit, their results, the daemon's own
// writes left out. Other test runs may share the kernel, so every assertion only looks at
// events from this test's own processes and cgroups.
#include <bpf/bpf.h>
#include <fcntl.h>
#include <linux/bpf.h>
#include <poll.h>
#include <grp.h>
#include <linux/capability.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <sys/uio.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <chrono>
#include <cstring>
#include <functional>
#include <optional>
#include <string>
#include <thread>
#include <tuple>
#include <vector>

#include <gtest/gtest.h>

#include "probe/probe.h"
#include "support/cgroup_sandbox.h"
#include "support/probe_event_log.h"
#include "support/probe_fixture.h"
#include "support/process.h"
#include "support/temp_dir.h"

namespace gdw {
namespace {

using test::CgroupSandbox;
using test::inode_of;
using test::own_comm;
using test::own_v2_cgroup_dir;
using test::ProbeAtSyscallExitTest;
using test::ProbeTest;
using test::ProbeWithHookTest;
using test::WriteCall;
using test::WriterRun;
using test::write_rule_from_child;

// Where the write is seen: at the permission check with or without the syscall hook, or
// (kernels without cap_capable) on the devices controller's write path (fexit, where the
// kernel allows it), or at syscall exit.
enum class Tier { kPermissionCheck, kPermissionCheckAndHook, kWritePath, kSyscallExit };

class ProbeRuleWriteTest : public ProbeTest, public ::testing::WithParamInterface<std::tuple<WriteCall, Tier>> {
 protected:
  Tier tier() const { return std::get<1>(GetParam()); }
  bool at_permission_check() const { return tier() == Tier::kPermissionCheck || tier() == Tier::kPermissionCheckAndHook; }
  ProbeOptions options() const override {
    return {.use_capability_tracepoint = at_permission_check(),
            .syscall_hook = tier() == Tier::kPermissionCheckAndHook || tier() == Tier::kSyscallExit,
            .write_path_hook = tier() == Tier::kWritePath};
  }
};

TEST_P(ProbeRuleWriteTest, ReportsWriterRuleTargetAndResult) {
  if (at_permission_check() && !probe_->capability_hook())
    GTEST_SKIP() << "no cap_capable tracepoint on this kernel (before 6.14)";
  if (tier() == Tier::kWritePath && !probe_->write_path_hook()) {
    // Refused here (this CI host refuses trampolines; the kernel matrix's guests take it):
    // the probe says why, and rule writers are then named only at syscall exit.
    EXPECT_FALSE(probe_->write_path_hook_refusal().empty());
    EXPECT_TRUE(probe_->rule_writes_need_syscall_hook()) << "degraded to the syscall hook";
    std::printf("[ refused  ] the write path hook on this kernel: %s\n", probe_->write_path_hook_refusal().c_str());
    return;
  }
  EXPECT_EQ(probe_->rule_writes_need_syscall_hook(), tier() == Tier::kSyscallExit);
  CgroupSandbox sandbox("devices", "probe-rule");
  std::string target = sandbox.make("target");
  std::string writer_cgroup = sandbox.make("writer");

  WriterRun run = write_rule_from_child(writer_cgroup, target + "/devices.deny", "c 195:3 rwm\n", std::get<0>(GetParam()));
  ASSERT_EQ(run.result, 12) << "the rule write itself failed";

  auto event = log_->wait_for<RuleWriteEvent>([&](const RuleWriteEvent& e) { return e.writer.pid == run.pid; });
  ASSERT_TRUE(event) << "no rule-write event from writer " << run.pid;
  EXPECT_EQ(event->writer.tid, run.pid);
  EXPECT_EQ(event->writer.comm, "gdw-rule-writer");
  EXPECT_EQ(event->writer.parent_pid, ::getpid());
  EXPECT_EQ(event->writer.parent_comm, own_comm());
  EXPECT_EQ(event->writer.devices_cgroup_id, inode_of(writer_cgroup));
  EXPECT_EQ(event->writer.cgroup_id, inode_of(own_v2_cgroup_dir()));
  EXPECT_EQ(event->target_cgroup_id, inode_of(target));
  EXPECT_TRUE(event->deny);
  EXPECT_EQ(event->rule, "c 195:3 rwm");
  EXPECT_GT(event->ktime_ns, 0u);
  EXPECT_EQ(event->seen_at_syscall_exit, tier() == Tier::kSyscallExit);

  switch (tier()) {
    case Tier::kSyscallExit:
    case Tier::kWritePath:  // after the kernel applied it
      EXPECT_EQ(event->result, 12);
      break;
    case Tier::kPermissionCheckAndHook: {
      EXPECT_FALSE(event->result) << "the kernel had not parsed the rule yet";
      auto result = log_->wait_for<RuleWriteResultEvent>([&](const RuleWriteResultEvent& e) { return e.pid == run.pid; });
      ASSERT_TRUE(result) << "the syscall hook did not report the write's result";
      EXPECT_EQ(result->tid, run.pid);
      EXPECT_EQ(result->result, 12);
      EXPECT_EQ(result->target_cgroup_id, inode_of(target));
      EXPECT_EQ(result->write_ktime_ns, event->ktime_ns);
      break;
    }
    case Tier::kPermissionCheck: {
      EXPECT_FALSE(event->result);
      // The fence: a later write's event; no result for the first can come after it.
      WriterRun fence = write_rule_from_child(writer_cgroup, target + "/devices.allow", "c 195:0 rw", WriteCall::kWrite);
      ASSERT_TRUE(log_->wait_for<RuleWriteEvent>([&](const RuleWriteEvent& e) { return e.writer.pid == fence.pid; }));
      EXPECT_TRUE(log_->all<RuleWriteResultEvent>([&](const RuleWriteResultEvent& e) { return e.pid == run.pid; }).empty())
          << "a result without the syscall hook";
      break;
    }
  }
}

INSTANTIATE_TEST_SUITE_P(
    Syscalls, ProbeRuleWriteTest,
    ::testing::Combine(::testing::Values(WriteCall::kWrite, WriteCall::kPwrite, WriteCall::kWritev),
                       ::testing::Values(Tier::kPermissionCheck, Tier::kPermissionCheckAndHook, Tier::kWritePath,
                                         Tier::kSyscallExit)),
    [](const auto& info) {
      std::string name;
      switch (std::get<0>(info.param)) {
        case WriteCall::kWrite: name = "write"; break;
        case WriteCall::kPwrite: name = "pwrite"; break;
        case WriteCall::kWritev: name = "writev"; break;
      }
      switch (std::get<1>(info.param)) {
        case Tier::kPermissionCheck: return name + "_AtPermissionCheck";
        case Tier::kPermissionCheckAndHook: return name + "_AtPermissionCheckWithHook";
        case Tier::kWritePath: return name + "_OnTheWritePath";
        case Tier::kSyscallExit: return name + "_AtSyscallExit";
      }
      return name;
    });

TEST_F(ProbeTest, WriteRefusedAtThePermissionCheckCarriesEpermWithoutTheHook) {
  CgroupSandbox sandbox("devices", "probe-nocap");
  std::string target = sandbox.make("target");
  WriterRun run = write_rule_from_child(sandbox.make("writer"), target + "/devices.deny", "c 195:3 rwm",
                                        WriteCall::kWrite, /*without_sys_admin=*/true);
  ASSERT_EQ(run.result, -EPERM);
  auto event = log_->wait_for<RuleWriteEvent>([&](const RuleWriteEvent& e) { return e.writer.pid == run.pid; });
  ASSERT_TRUE(event);
  EXPECT_EQ(event->rule, "c 195:3 rwm");
  EXPECT_EQ(event->result, -EPERM) << "refused by the CAP_SYS_ADMIN check: known at once";
  EXPECT_EQ(event->target_cgroup_id, inode_of(target));
}

// A child cgroup can never allow what its parent denies: the kernel answers EPERM after
// parsing the rule, past the permission check.
WriterRun allow_beyond_the_parent(CgroupSandbox& sandbox) {
  sandbox.make("strict");
  EXPECT_EQ(sandbox.deny("strict", "a"), 0);  // "a" is refused once a cgroup has children
  sandbox.make("strict/child");               // inherits the deny-all
  return write_rule_from_child(sandbox.path("strict"), sandbox.path("strict/child") + "/devices.allow", "c 1:3 rwm",
                               WriteCall::kWrite);
}

TEST_F(ProbeWithHookTest, RejectedRuleWriteResultCarriesTheError) {
  if (!probe_->capability_hook()) GTEST_SKIP() << "no cap_capable tracepoint on this kernel (before 6.14)";
  CgroupSandbox sandbox("devices", "probe-reject");
  WriterRun run = allow_beyond_the_parent(sandbox);
  ASSERT_EQ(run.result, -EPERM);

  auto event = log_->wait_for<RuleWriteEvent>([&](const RuleWriteEvent& e) { return e.writer.pid == run.pid; });
  ASSERT_TRUE(event);
  EXPECT_FALSE(event->deny);
  EXPECT_EQ(event->rule, "c 1:3 rwm");
  EXPECT_FALSE(event->result) << "passed the permission check";
  EXPECT_EQ(event->target_cgroup_id, inode_of(sandbox.path("strict/child")));
  auto result = log_->wait_for<RuleWriteResultEvent>([&](const RuleWriteResultEvent& e) { return e.pid == run.pid; });
  ASSERT_TRUE(result);
  EXPECT_EQ(result->result, -EPERM);
}

TEST_F(ProbeAtSyscallExitTest, RejectedRuleWriteCarriesTheError) {
  CgroupSandbox sandbox("devices", "probe-reject");
  WriterRun run = allow_beyond_the_parent(sandbox);
  ASSERT_EQ(run.result, -EPERM);
  auto event = log_->wait_for<RuleWriteEvent>([&](const RuleWriteEvent& e) { return e.writer.pid == run.pid; });
  ASSERT_TRUE(event);
  EXPECT_EQ(event->result, -EPERM);
  EXPECT_TRUE(event->seen_at_syscall_exit);
}

TEST_F(ProbeTest, WritesToOtherCgroupFilesAreNotReported) {
  CgroupSandbox sandbox("devices", "probe-other");
  std::string target = sandbox.make("target");
  std::string writer_cgroup = sandbox.make("writer");
  // cgroup.procs is a cgroup v1 file too, just not a device rule file.
  pid_t sleeper = sandbox.add_sleeper("writer");
  WriterRun other = write_rule_from_child(writer_cgroup, target + "/cgroup.procs", std::to_string(sleeper),
                                          WriteCall::kWrite);
  ASSERT_GT(other.result, 0);
  // The fence: a reported write after the unreported one.
  WriterRun fence = write_rule_from_child(writer_cgroup, target + "/devices.allow", "c 195:0 rw", WriteCall::kWrite);
  ASSERT_TRUE(log_->wait_for<RuleWriteEvent>([&](const RuleWriteEvent& e) { return e.writer.pid == fence.pid; }));
  EXPECT_TRUE(log_->all<RuleWriteEvent>([&](const RuleWriteEvent& e) { return e.writer.pid == other.pid; }).empty());
}

// The daemon's own grants: left out in the kernel (ProbeOptions::ignored_writer_tgid), at
// the permission check and at syscall exit alike; everyone else's writes still come.
class ProbeIgnoringOwnWritesTest : public ProbeTest, public ::testing::WithParamInterface<bool> {
 protected:
  ProbeOptions options() const override {
    return {.use_capability_tracepoint = GetParam(), .syscall_hook = !GetParam(),
            .ignored_writer_tgid = static_cast<std::uint32_t>(::getpid())};
  }
};

TEST_P(ProbeIgnoringOwnWritesTest, OwnRuleWritesAreNotReportedOthersAre) {
  CgroupSandbox sandbox("devices", "probe-own");
  std::string target = sandbox.make("target");
  // From a second thread of this process too: the tgid is what is left out.
  std::thread([&] {
    int fd = ::open((target + "/devices.deny").c_str(), O_WRONLY | O_CLOEXEC);
    ASSERT_GE(fd, 0);
    EXPECT_GT(::write(fd, "c 195:1 rwm", 11), 0);
    ::close(fd);
  }).join();
  int fd = ::open((target + "/devices.allow").c_str(), O_WRONLY | O_CLOEXEC);
  ASSERT_GE(fd, 0);
  EXPECT_GT(::write(fd, "c 195:1 rw", 10), 0);
  ::close(fd);
  WriterRun fence = write_rule_from_child(sandbox.make("writer"), target + "/devices.deny", "c 195:2 rwm",
                                          WriteCall::kWrite);
  ASSERT_TRUE(log_->wait_for<RuleWriteEvent>([&](const RuleWriteEvent& e) { return e.writer.pid == fence.pid; }))
      << "another process's write is still reported";
  EXPECT_TRUE(log_->all<RuleWriteEvent>([](const RuleWriteEvent& e) { return e.writer.pid == ::getpid(); }).empty());
}

INSTANTIATE_TEST_SUITE_P(Tiers, ProbeIgnoringOwnWritesTest, ::testing::Bool(),
                         [](const ::testing::TestParamInfo<bool>& info) {
                           return info.param ? std::string("AtPermissionCheck") : std::string("AtSyscallExit");
                         });

// As the daemon loads it: devices.allow writes are left out in the kernel.
class ProbeWithoutAllowWritesTest : public ProbeTest {
 protected:
  ProbeOptions options() const override { return {.report_allow_writes = false}; }
};

TEST_F(ProbeWithoutAllowWritesTest, OnlyDenyWritesAreReported) {
  CgroupSandbox sandbox("devices", "probe-deny-only");
  std::string target = sandbox.make("target");
  std::string writer_cgroup = sandbox.make("writer");
  WriterRun allow = write_rule_from_child(writer_cgroup, target + "/devices.allow", "c 195:0 rw", WriteCall::kWrite);
  ASSERT_GT(allow.result, 0);
  WriterRun fence = write_rule_from_child(writer_cgroup, target + "/devices.deny", "c 195:0 rwm", WriteCall::kWrite);
  auto deny = log_->wait_for<RuleWriteEvent>([&](const RuleWriteEvent& e) { return e.writer.pid == fence.pid; });
  ASSERT_TRUE(deny);
  EXPECT_TRUE(deny->deny);
  EXPECT_TRUE(log_->all<RuleWriteEvent>([&](const RuleWriteEvent& e) { return e.writer.pid == allow.pid; }).empty());
}

// A deny write to a watched cgroup (a GPU container) wakes nobody: its inotify event does,
// and the daemon reads the probe first. A deny write elsewhere, and any allow write, wakes.
bool wakes_within(Probe& probe, std::chrono::milliseconds timeout) {
  pollfd pfd{probe.fd(), POLLIN, 0};
  return ::poll(&pfd, 1, static_cast<int>(timeout.count())) > 0;
}

TEST_F(ProbeTest, DenyWritesToWatchedCgroupsWaitWithoutWakingTheReader) {
  CgroupSandbox sandbox("devices", "probe-nowake");
  std::string watched = sandbox.make("watched");
  std::string other = sandbox.make("other");
  std::string writer_cgroup = sandbox.make("writer");
  ASSERT_TRUE(probe_->watch_cgroup(inode_of(watched)));
  // Empty, and seen empty (epoll forgets a drained ring buffer when asked): the next record
  // may wake.
  ASSERT_TRUE(probe_->consume([](const ProbeEvent&) {}));
  ASSERT_FALSE(wakes_within(*probe_, std::chrono::milliseconds(0)));

  WriterRun quiet = write_rule_from_child(writer_cgroup, watched + "/devices.deny", "c 195:0 rwm", WriteCall::kWrite);
  ASSERT_GT(quiet.result, 0);
  EXPECT_FALSE(wakes_within(*probe_, std::chrono::milliseconds(200))) << "woken by a watched container's deny write";
  ASSERT_TRUE(log_->wait_for<RuleWriteEvent>([&](const RuleWriteEvent& e) { return e.writer.pid == quiet.pid; }))
      << "the record waits to be read";

  WriterRun loud = write_rule_from_child(writer_cgroup, other + "/devices.deny", "c 195:0 rwm", WriteCall::kWrite);
  ASSERT_GT(loud.result, 0);
  EXPECT_TRUE(wakes_within(*probe_, std::chrono::seconds(3))) << "a deny write to an unwatched cgroup wakes";
  ASSERT_TRUE(log_->wait_for<RuleWriteEvent>([&](const RuleWriteEvent& e) { return e.writer.pid == loud.pid; }));

  WriterRun allow = write_rule_from_child(writer_cgroup, watched + "/devices.allow", "c 195:0 rw", WriteCall::kWrite);
  ASSERT_GT(allow.result, 0);
  EXPECT_TRUE(wakes_within(*probe_, std::chrono::seconds(3))) << "an allow write wakes";
}

}  // namespace
}  // namespace gdw
