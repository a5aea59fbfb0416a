// The eBPF probe on the real kernel: denied opens of GPU nodes in watched cgroups, reported
// while the syscall hook is attached, and the opens of other paths counted in the kernel.
// Other test runs may share the kernel, so every assertion only looks at events from this
// test's own processes and cgroups.
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

#include <cerrno>
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
using test::kGpuMajor;
using test::make_char_node;
using test::ProbeTest;
using test::TempDir;
using test::WriteCall;
using test::WriterRun;
using test::write_rule_from_child;

// ---- denied opens ---------------------------------------------------------------------------

// A child that joins a devices cgroup, opens a node there and stays alive until released,
// so that its /proc/<pid>/root still resolves when the event is consumed.
class HeldOpener {
 public:
  HeldOpener(const std::string& cgroup, const std::string& node) {
    int report[2];
    if (::pipe2(report, O_CLOEXEC) != 0 || ::pipe2(release_, O_CLOEXEC) != 0) return;
    pid_ = ::fork();
    if (pid_ == 0) {
      ::close(release_[1]);
      int err = 255;
      if (test::move_to_cgroup(cgroup, ::getpid()) == 0) {
        int fd = ::open(node.c_str(), O_RDWR | O_NONBLOCK | O_CLOEXEC);
        err = fd >= 0 ? 0 : errno;
      }
      (void)!::write(report[1], &err, sizeof(err));
      char byte;
      (void)!::read(release_[0], &byte, 1);  // returns at EOF: the parent closed its end
      _exit(0);
    }
    ::close(report[1]);
    ::close(release_[0]);
    (void)!::read(report[0], &open_errno_, sizeof(open_errno_));
    ::close(report[0]);
  }
  ~HeldOpener() { release(); }
  void release() {
    if (pid_ <= 0) return;
    ::close(release_[1]);
    ::waitpid(pid_, nullptr, 0);
    pid_ = -1;
  }
  pid_t pid() const { return pid_; }
  int open_errno() const { return open_errno_; }

 private:
  pid_t pid_ = -1;
  int release_[2] = {-1, -1};
  int open_errno_ = -1;
};

// Denied opens are the syscall hook's; most tests here have it attached from the start.
class ProbeDeniedOpenTest : public ProbeTest {
 protected:
  ProbeOptions options() const override { return {.use_capability_tracepoint = true, .syscall_hook = hooked_}; }

  void SetUp() override {
    ProbeTest::SetUp();
    if (IsSkipped() || HasFatalFailure()) return;
    sandbox_.emplace("devices", "probe-open");
    watched_ = sandbox_->make("watched");
    unwatched_ = sandbox_->make("unwatched");
    // Both cgroups deny everything but one GPU minor: 195:8 opens reach the (absent)
    // driver and fail with ENXIO, every other node fails with EPERM.
    for (const char* rel : {"watched", "unwatched"}) {
      ASSERT_EQ(sandbox_->deny(rel, "a"), 0);
      ASSERT_EQ(sandbox_->allow(rel, "c 195:8 rwm"), 0);
    }
    denied_gpu_ = nodes_ / "nvidia7";
    allowed_gpu_ = nodes_ / "nvidia8";
    null_copy_ = nodes_ / "null";
    make_char_node(denied_gpu_, kGpuMajor, 7);
    make_char_node(allowed_gpu_, kGpuMajor, 8);
    make_char_node(null_copy_, 1, 3);
    ASSERT_TRUE(probe_->watch_major(kGpuMajor));
    ASSERT_TRUE(probe_->watch_cgroup(inode_of(watched_)));
    ASSERT_TRUE(probe_->watch_device_node(denied_gpu_, kGpuMajor, 7));
    ASSERT_TRUE(probe_->watch_device_node(allowed_gpu_, kGpuMajor, 8));
  }

  bool from_this_test(const DeniedOpenEvent& e) const { return e.path.rfind(nodes_.path(), 0) == 0; }

  bool hooked_ = true;
  TempDir nodes_{"gdw-probe-nodes"};
  std::optional<CgroupSandbox> sandbox_;
  std::string watched_, unwatched_, denied_gpu_, allowed_gpu_, null_copy_;
};

TEST_F(ProbeDeniedOpenTest, OnlyTheDeniedGpuOpenInTheWatchedCgroupIsReported) {
  EXPECT_EQ(sandbox_->open_errno("watched", allowed_gpu_), ENXIO);
  EXPECT_EQ(sandbox_->open_errno("watched", null_copy_), EPERM);
  EXPECT_EQ(sandbox_->open_errno("unwatched", denied_gpu_), EPERM);
  EXPECT_EQ(sandbox_->open_errno("watched", denied_gpu_), EPERM);

  auto event = log_->wait_for<DeniedOpenEvent>([&](const DeniedOpenEvent& e) { return from_this_test(e); });
  ASSERT_TRUE(event) << "no denied-open event";
  EXPECT_EQ(event->path, denied_gpu_);
  EXPECT_EQ(event->major, kGpuMajor);
  EXPECT_EQ(event->minor, 7u);
  EXPECT_EQ(event->opener.devices_cgroup_id, inode_of(watched_));
  EXPECT_EQ(event->opener.parent_pid, ::getpid());
  EXPECT_EQ(event->flags & O_ACCMODE, O_RDWR);
  // The denied open was the last of the four: anything the others produced came first.
  EXPECT_EQ(log_->all<DeniedOpenEvent>([&](const DeniedOpenEvent& e) { return from_this_test(e); }).size(), 1u);
}

// Only registered GPU node paths become events. Anything else denied in a watched cgroup
// (a file, a node of another major, even a GPU-numbered node at a path nobody registered)
// is only counted in the kernel: nothing a process passed to open() is looked up here.
TEST_F(ProbeDeniedOpenTest, UnregisteredPathsAreCountedInTheKernelNeverDelivered) {
  std::string unregistered_gpu = nodes_ / "nvidia9";
  make_char_node(unregistered_gpu, kGpuMajor, 9);
  auto before = probe_->other_denied_opens(inode_of(watched_));
  ASSERT_TRUE(before) << before.error().message;

  HeldOpener null_opener(watched_, null_copy_);  // alive: its root could still be looked up
  ASSERT_EQ(null_opener.open_errno(), EPERM);
  HeldOpener gpu_opener(watched_, unregistered_gpu);
  ASSERT_EQ(gpu_opener.open_errno(), EPERM);
  EXPECT_EQ(sandbox_->open_errno("unwatched", null_copy_), EPERM);  // not watched: not counted
  EXPECT_EQ(sandbox_->open_errno("watched", denied_gpu_), EPERM);   // the fence

  ASSERT_TRUE(log_->wait_for<DeniedOpenEvent>([&](const DeniedOpenEvent& e) { return e.path == denied_gpu_; }));
  EXPECT_EQ(log_->all<DeniedOpenEvent>([&](const DeniedOpenEvent& e) { return from_this_test(e); }).size(), 1u)
      << "only the registered node's open is an event";
  auto after = probe_->other_denied_opens(inode_of(watched_));
  ASSERT_TRUE(after) << after.error().message;
  EXPECT_EQ(*after, *before + 2);
  EXPECT_FALSE(probe_->other_denied_opens(inode_of(unwatched_))) << "an unwatched cgroup has no count";
  // Watching it again keeps the count (the daemon adds differences to its metric).
  ASSERT_TRUE(probe_->watch_cgroup(inode_of(watched_)));
  EXPECT_EQ(*probe_->other_denied_opens(inode_of(watched_)), *before + 2);
}

// A process in `cgroup` that opens `node` `times` times and exits; returns its exit status.
int open_repeatedly(const std::string& cgroup, const std::string& node, int times) {
  pid_t pid = ::fork();
  if (pid == 0) {
    if (test::move_to_cgroup(cgroup, ::getpid()) != 0) _exit(2);
    for (int i = 0; i < times; ++i) {
      int fd = ::open(node.c_str(), O_RDWR | O_NONBLOCK | O_CLOEXEC);
      if (fd >= 0 || errno != EPERM) _exit(1);
    }
    _exit(0);
  }
  int status = 0;
  ::waitpid(pid, &status, 0);
  return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

// consume() stops after its budget; what is left keeps the fd readable and comes next time.
TEST_F(ProbeDeniedOpenTest, ConsumeHandsOverAtMostItsBudgetAndKeepsTheRest) {
  constexpr int kOpens = 150;
  ASSERT_EQ(open_repeatedly(watched_, denied_gpu_, kOpens), 0);
  std::vector<DeniedOpenEvent> seen;
  auto collect = [&](const ProbeEvent& e) {
    if (auto* open = std::get_if<DeniedOpenEvent>(&e); open && from_this_test(*open)) seen.push_back(*open);
  };
  int turns = 0;
  auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(5);
  while (seen.size() < static_cast<std::size_t>(kOpens) && std::chrono::steady_clock::now() < deadline) {
    pollfd pfd{probe_->fd(), POLLIN, 0};
    ASSERT_EQ(::poll(&pfd, 1, 1000), 1) << "records left, yet the fd is not readable";
    auto n = probe_->consume(collect, 64);
    ASSERT_TRUE(n) << n.error().message;
    EXPECT_LE(*n, 64);
    ++turns;
  }
  EXPECT_EQ(seen.size(), static_cast<std::size_t>(kOpens));
  EXPECT_GE(turns, 3) << "150 records in turns of at most 64";
}

TEST_F(ProbeDeniedOpenTest, UnwatchedCgroupStopsReporting) {
  ASSERT_TRUE(probe_->unwatch_cgroup(inode_of(watched_)));
  ASSERT_TRUE(probe_->watch_cgroup(inode_of(unwatched_)));
  EXPECT_EQ(sandbox_->open_errno("watched", denied_gpu_), EPERM);
  EXPECT_EQ(sandbox_->open_errno("unwatched", denied_gpu_), EPERM);

  auto event = log_->wait_for<DeniedOpenEvent>([&](const DeniedOpenEvent& e) { return from_this_test(e); });
  ASSERT_TRUE(event);
  EXPECT_EQ(event->opener.devices_cgroup_id, inode_of(unwatched_));
  EXPECT_EQ(log_->all<DeniedOpenEvent>([&](const DeniedOpenEvent& e) { return from_this_test(e); }).size(), 1u);
}

class ProbeDeniedOpenWithoutHookTest : public ProbeDeniedOpenTest {
 protected:
  ProbeDeniedOpenWithoutHookTest() { hooked_ = false; }

  // A rule write after the opens: its event comes after anything they produced.
  void fence() {
    WriterRun run = write_rule_from_child(unwatched_, unwatched_ + "/devices.allow", "c 195:8 rwm", WriteCall::kWrite);
    ASSERT_TRUE(log_->wait_for<RuleWriteEvent>([&](const RuleWriteEvent& e) { return e.writer.pid == run.pid; }));
  }
  std::size_t denied_opens() const {
    return log_->all<DeniedOpenEvent>([&](const DeniedOpenEvent& e) { return from_this_test(e); }).size();
  }
};

TEST_F(ProbeDeniedOpenWithoutHookTest, ReportedOnlyWhileTheHookIsAttached) {
  ASSERT_FALSE(probe_->syscall_hook_attached());
  EXPECT_EQ(sandbox_->open_errno("watched", denied_gpu_), EPERM);
  fence();
  EXPECT_EQ(denied_opens(), 0u) << "no syscall hook, no denied-open events";

  ASSERT_TRUE(probe_->set_syscall_hook(true));
  EXPECT_TRUE(probe_->syscall_hook_attached());
  EXPECT_EQ(sandbox_->open_errno("watched", denied_gpu_), EPERM);
  auto event = log_->wait_for<DeniedOpenEvent>([&](const DeniedOpenEvent& e) { return from_this_test(e); });
  ASSERT_TRUE(event);
  EXPECT_EQ(event->minor, 7u);

  ASSERT_TRUE(probe_->set_syscall_hook(false));
  EXPECT_FALSE(probe_->syscall_hook_attached());
  EXPECT_EQ(sandbox_->open_errno("watched", denied_gpu_), EPERM);
  fence();
  EXPECT_EQ(denied_opens(), 1u) << "reported after the hook was detached";
}

}  // namespace
}  // namespace gdw
