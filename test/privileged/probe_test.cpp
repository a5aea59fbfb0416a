// The eBPF probe on the real kernel: rule writes to devices.allow/deny (v1) at the
// permission check and at syscall exit, denied opens of GPU nodes in watched cgroups,
// device-program loads and attach/detach (v2), cgroup mkdir/rmdir, and what the syscall
// hook adds when attached. Other test runs may share the kernel, so every assertion only
// looks at events from this test's own processes and cgroups.
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
#include "support/process.h"
#include "support/temp_dir.h"

namespace gdw {
namespace {

using test::CgroupSandbox;
using test::EventLog;
using test::TempDir;

constexpr std::uint32_t kGpuMajor = 195;  // nvidia's fixed char major; no driver behind it here

std::uint64_t inode_of(const std::string& path) {
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0) ADD_FAILURE() << "stat " << path << ": " << std::strerror(errno);
  return st.st_ino;
}

std::string own_comm() {
  std::string comm = test::read_file("/proc/self/comm");
  while (!comm.empty() && comm.back() == '\n') comm.pop_back();
  return comm;
}

// This process's cgroup v2 directory, from the "0::<path>" line of /proc/self/cgroup.
std::string own_v2_cgroup_dir() {
  std::string cgroups = test::read_file("/proc/self/cgroup");
  auto at = cgroups.find("0::");
  std::string rel = cgroups.substr(at + 3, cgroups.find('\n', at) - at - 3);
  return "/sys/fs/cgroup/unified" + rel;
}

void make_char_node(const std::string& path, unsigned major_number, unsigned minor_number) {
  ASSERT_EQ(::mknod(path.c_str(), S_IFCHR | 0666, makedev(major_number, minor_number)), 0)
      << "mknod " << path << ": " << std::strerror(errno);
}

// The probe as the daemon loads it by default: the syscall hook detached.
class ProbeTest : public ::testing::Test {
 protected:
  virtual ProbeOptions options() const { return {}; }

  void SetUp() override {
    if (!test::is_root()) GTEST_SKIP() << "needs root: loads BPF programs and creates cgroups";
    auto loaded = Probe::load(options());
    if (!loaded) {
      const std::string& why = loaded.error().message;
      if (why.find("permission denied") != std::string::npos || why.find("BTF is not available") != std::string::npos) {
        GTEST_SKIP() << "probe cannot load here: " << why;
      }
      FAIL() << "probe failed to load: " << why;
    }
    probe_ = std::move(*loaded);
    log_.emplace(*probe_);
  }

  std::unique_ptr<Probe> probe_;
  std::optional<EventLog> log_;
};

// The syscall hook attached, as the daemon does while a GPU container misses devices.
class ProbeWithHookTest : public ProbeTest {
 protected:
  ProbeOptions options() const override { return {.use_capability_tracepoint = true, .syscall_hook = true}; }
};

// As on a kernel without the cap_capable tracepoint (< 6.14): everything at syscall exit.
class ProbeAtSyscallExitTest : public ProbeTest {
 protected:
  ProbeOptions options() const override { return {.use_capability_tracepoint = false, .syscall_hook = true}; }
};

TEST(ProbeLoad, WithoutPrivilegeSaysWhatIsMissing) {
  if (!test::is_root()) GTEST_SKIP() << "needs root to start a child as an unprivileged user";
  int report[2];
  ASSERT_EQ(::pipe2(report, O_CLOEXEC), 0);
  pid_t pid = ::fork();
  if (pid == 0) {
    constexpr uid_t kNobody = 65534;
    if (::setgroups(0, nullptr) != 0 || ::setresgid(kNobody, kNobody, kNobody) != 0 ||
        ::setresuid(kNobody, kNobody, kNobody) != 0) {
      _exit(2);
    }
    auto loaded = Probe::load();
    std::string message = loaded ? "loaded" : loaded.error().message;
    (void)!::write(report[1], message.data(), message.size());
    _exit(0);
  }
  ::close(report[1]);
  std::string message;
  char buffer[512];
  for (ssize_t n; (n = ::read(report[0], buffer, sizeof(buffer))) > 0;) message.append(buffer, n);
  ::close(report[0]);
  int status = 0;
  ::waitpid(pid, &status, 0);
  ASSERT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << "could not drop privileges";
  EXPECT_NE(message.find("permission denied"), std::string::npos) << message;
  EXPECT_NE(message.find("CAP_BPF"), std::string::npos) << message;
}

// ---- v1 rule writes ------------------------------------------------------------------------

enum class WriteCall { kWrite, kPwrite, kWritev };

struct WriterRun {
  pid_t pid = -1;
  long result = 0;  // what the syscall returned in the child: bytes or -errno
};

// Clears CAP_SYS_ADMIN from the calling thread's effective set (root keeps its uid, so
// opening root's files still works).
bool drop_effective_sys_admin() {
  __user_cap_header_struct header{_LINUX_CAPABILITY_VERSION_3, 0};
  __user_cap_data_struct data[2] = {};
  if (::syscall(SYS_capget, &header, data) != 0) return false;
  data[CAP_SYS_ADMIN / 32].effective &= ~(1u << (CAP_SYS_ADMIN % 32));
  return ::syscall(SYS_capset, &header, data) == 0;
}

// A child named "gdw-rule-writer" joins `writer_cgroup` (devices hierarchy) and writes
// `rule` to `file` with the given syscall (after dropping CAP_SYS_ADMIN, if asked).
WriterRun write_rule_from_child(const std::string& writer_cgroup, const std::string& file, const std::string& rule,
                                WriteCall call, bool without_sys_admin = false) {
  int report[2];
  if (::pipe2(report, O_CLOEXEC) != 0) return {};
  pid_t pid = ::fork();
  if (pid == 0) {
    ::prctl(PR_SET_NAME, "gdw-rule-writer");
    long result = -1000;
    if (test::move_to_cgroup(writer_cgroup, ::getpid()) == 0) {
      int fd = ::open(file.c_str(), O_WRONLY | O_CLOEXEC);
      if (fd >= 0 && without_sys_admin && !drop_effective_sys_admin()) {
        ::close(fd);
        fd = -1;
      }
      if (fd >= 0) {
        ssize_t n = -1;
        switch (call) {
          case WriteCall::kWrite: n = ::write(fd, rule.data(), rule.size()); break;
          case WriteCall::kPwrite: n = ::pwrite(fd, rule.data(), rule.size(), 0); break;
          case WriteCall::kWritev: {
            iovec iov{const_cast<char*>(rule.data()), rule.size()};
            n = ::writev(fd, &iov, 1);
            break;
          }
        }
        result = n < 0 ? -errno : n;
      }
    }
    (void)!::write(report[1], &result, sizeof(result));
    _exit(0);
  }
  ::close(report[1]);
  WriterRun run{pid, -2000};
  (void)!::read(report[0], &run.result, sizeof(run.result));
  ::close(report[0]);
  ::waitpid(pid, nullptr, 0);
  return run;
}

// Where the write is seen: at the permission check with or without the syscall hook, or
// (kernels without cap_capable) at syscall exit.
enum class Tier { kPermissionCheck, kPermissionCheckAndHook, kSyscallExit };

class ProbeRuleWriteTest : public ProbeTest, public ::testing::WithParamInterface<std::tuple<WriteCall, Tier>> {
 protected:
  Tier tier() const { return std::get<1>(GetParam()); }
  ProbeOptions options() const override {
    return {.use_capability_tracepoint = tier() != Tier::kSyscallExit, .syscall_hook = tier() != Tier::kPermissionCheck};
  }
};

TEST_P(ProbeRuleWriteTest, ReportsWriterRuleTargetAndResult) {
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
                       ::testing::Values(Tier::kPermissionCheck, Tier::kPermissionCheckAndHook, Tier::kSyscallExit)),
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

// ---- v2 device programs ---------------------------------------------------------------------

// A BPF_PROG_TYPE_CGROUP_DEVICE program that allows everything ("r0 = 1; exit").
int load_allow_all_device_program() {
  const bpf_insn insns[] = {
      {BPF_ALU64 | BPF_MOV | BPF_K, BPF_REG_0, 0, 0, 1},
      {BPF_JMP | BPF_EXIT, 0, 0, 0, 0},
  };
  return bpf_prog_load(BPF_PROG_TYPE_CGROUP_DEVICE, "gdw_test_allow", "GPL", insns, 2, nullptr);
}

std::uint32_t prog_id(int prog_fd) {
  bpf_prog_info info{};
  std::uint32_t len = sizeof(info);
  if (bpf_obj_get_info_by_fd(prog_fd, &info, &len) != 0) ADD_FAILURE() << "bpf_obj_get_info_by_fd failed";
  return info.id;
}

// Attach/detach events are the syscall hook's.
class ProbeDeviceProgramTest : public ProbeTest {
 protected:
  ProbeOptions options() const override { return {.use_capability_tracepoint = true, .syscall_hook = true}; }

  void SetUp() override {
    ProbeTest::SetUp();
    if (IsSkipped() || HasFatalFailure()) return;
    if (!CgroupSandbox::available("unified")) GTEST_SKIP() << "no writable cgroup2 at /sys/fs/cgroup/unified";
    sandbox_.emplace("unified", "probe-v2");
    cgroup_dir_ = sandbox_->make("container");
    cgroup_id_ = inode_of(cgroup_dir_);
    cgroup_fd_ = ::open(cgroup_dir_.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    ASSERT_GE(cgroup_fd_, 0);
    first_prog_ = load_allow_all_device_program();
    second_prog_ = load_allow_all_device_program();
    ASSERT_GE(first_prog_, 0) << "loading a cgroup device program: " << std::strerror(errno);
    ASSERT_GE(second_prog_, 0);
  }
  void TearDown() override {
    for (int fd : {first_prog_, second_prog_, cgroup_fd_}) {
      if (fd >= 0) ::close(fd);
    }
  }

  std::optional<DeviceProgramEvent> wait_for_command(DeviceProgramEvent::Command command) {
    return log_->wait_for<DeviceProgramEvent>([&](const DeviceProgramEvent& e) {
      return e.caller.pid == ::getpid() && e.command == command && e.target_cgroup_id == cgroup_id_;
    });
  }

  std::optional<CgroupSandbox> sandbox_;
  std::string cgroup_dir_;
  std::uint64_t cgroup_id_ = 0;
  int cgroup_fd_ = -1, first_prog_ = -1, second_prog_ = -1;
};

TEST_F(ProbeDeviceProgramTest, ProgAttachAndDetach) {
  ASSERT_EQ(bpf_prog_attach(first_prog_, cgroup_fd_, BPF_CGROUP_DEVICE, BPF_F_ALLOW_MULTI), 0);
  ASSERT_EQ(bpf_prog_detach2(first_prog_, cgroup_fd_, BPF_CGROUP_DEVICE), 0);

  auto attach = wait_for_command(DeviceProgramEvent::Command::kProgAttach);
  ASSERT_TRUE(attach);
  EXPECT_EQ(attach->prog_id, prog_id(first_prog_));
  EXPECT_EQ(attach->flags, static_cast<std::uint32_t>(BPF_F_ALLOW_MULTI));
  EXPECT_EQ(attach->replaced_prog_id, 0u);
  EXPECT_EQ(attach->result, 0);
  EXPECT_EQ(attach->caller.comm, own_comm());

  auto detach = wait_for_command(DeviceProgramEvent::Command::kProgDetach);
  ASSERT_TRUE(detach);
  EXPECT_EQ(detach->prog_id, prog_id(first_prog_));
  EXPECT_EQ(detach->result, 0);
}

TEST_F(ProbeDeviceProgramTest, ReplacingAttachNamesTheReplacedProgram) {
  ASSERT_EQ(bpf_prog_attach(first_prog_, cgroup_fd_, BPF_CGROUP_DEVICE, BPF_F_ALLOW_MULTI), 0);
  struct bpf_prog_attach_opts opts {};
  opts.sz = sizeof(opts);
  opts.flags = BPF_F_ALLOW_MULTI | BPF_F_REPLACE;
  opts.replace_prog_fd = first_prog_;
  ASSERT_EQ(bpf_prog_attach_opts(second_prog_, cgroup_fd_, BPF_CGROUP_DEVICE, &opts), 0);
  ASSERT_EQ(bpf_prog_detach2(second_prog_, cgroup_fd_, BPF_CGROUP_DEVICE), 0);

  auto replace = log_->wait_for<DeviceProgramEvent>([&](const DeviceProgramEvent& e) {
    return e.caller.pid == ::getpid() && e.target_cgroup_id == cgroup_id_ && e.prog_id == prog_id(second_prog_) &&
           e.command == DeviceProgramEvent::Command::kProgAttach;
  });
  ASSERT_TRUE(replace);
  EXPECT_EQ(replace->replaced_prog_id, prog_id(first_prog_));
  EXPECT_EQ(replace->result, 0);
}

TEST_F(ProbeDeviceProgramTest, FailedDetachCarriesTheError) {
  // Nothing is attached: the kernel answers ENOENT.
  EXPECT_NE(bpf_prog_detach2(first_prog_, cgroup_fd_, BPF_CGROUP_DEVICE), 0);
  auto detach = wait_for_command(DeviceProgramEvent::Command::kProgDetach);
  ASSERT_TRUE(detach);
  EXPECT_EQ(detach->result, -ENOENT);
}

TEST_F(ProbeDeviceProgramTest, LinkCreateUpdateDetach) {
  int link = bpf_link_create(first_prog_, cgroup_fd_, BPF_CGROUP_DEVICE, nullptr);
  ASSERT_GE(link, 0) << std::strerror(errno);
  ASSERT_EQ(bpf_link_update(link, second_prog_, nullptr), 0);
  ASSERT_EQ(bpf_link_detach(link), 0);
  ::close(link);

  auto create = wait_for_command(DeviceProgramEvent::Command::kLinkCreate);
  ASSERT_TRUE(create);
  EXPECT_EQ(create->prog_id, prog_id(first_prog_));
  EXPECT_EQ(create->result, link);  // LINK_CREATE returns the new link's fd

  auto update = wait_for_command(DeviceProgramEvent::Command::kLinkUpdate);
  ASSERT_TRUE(update);
  EXPECT_EQ(update->prog_id, prog_id(second_prog_));
  EXPECT_EQ(update->replaced_prog_id, prog_id(first_prog_));
  EXPECT_EQ(update->result, 0);

  auto detach = wait_for_command(DeviceProgramEvent::Command::kLinkDetach);
  ASSERT_TRUE(detach);
  EXPECT_EQ(detach->prog_id, prog_id(second_prog_));
  EXPECT_EQ(detach->result, 0);
}

TEST_F(ProbeDeviceProgramTest, LinkMadeBeforeTheProbeStillNamesItsCgroupWhenUpdatedAndDetached) {
  int link = bpf_link_create(first_prog_, cgroup_fd_, BPF_CGROUP_DEVICE, nullptr);
  ASSERT_GE(link, 0) << std::strerror(errno);
  auto late = Probe::load(options());  // sees the link only through its listing at load
  ASSERT_TRUE(late) << late.error().message;
  ASSERT_EQ(bpf_link_update(link, second_prog_, nullptr), 0);
  ASSERT_EQ(bpf_link_detach(link), 0);
  ::close(link);

  EventLog late_log(**late);
  auto mine = [&](DeviceProgramEvent::Command command) {
    return [this, command](const DeviceProgramEvent& e) {
      return e.caller.pid == ::getpid() && e.command == command && e.target_cgroup_id == cgroup_id_;
    };
  };
  auto update = late_log.wait_for<DeviceProgramEvent>(mine(DeviceProgramEvent::Command::kLinkUpdate));
  ASSERT_TRUE(update);
  EXPECT_EQ(update->replaced_prog_id, prog_id(first_prog_));
  auto detach = late_log.wait_for<DeviceProgramEvent>(mine(DeviceProgramEvent::Command::kLinkDetach));
  ASSERT_TRUE(detach) << "the detached link's cgroup was not remembered";
  EXPECT_EQ(detach->prog_id, prog_id(second_prog_));
}

// Without the attach hook (a kernel that refuses it), device program loads are what the
// probe reports.
class ProbeWithoutAttachHookTest : public ProbeTest {
 protected:
  ProbeOptions options() const override { return {.attach_hook = false}; }
};

TEST_F(ProbeWithoutAttachHookTest, DeviceProgramLoadIsReportedWithoutTheHook) {
  EXPECT_FALSE(probe_->attach_hook());
  EXPECT_EQ(probe_->attach_hook_problem(), "turned off");
  const bpf_insn accept[] = {
      {BPF_ALU64 | BPF_MOV | BPF_K, BPF_REG_0, 0, 0, 0},
      {BPF_JMP | BPF_EXIT, 0, 0, 0, 0},
  };
  // A socket filter first: not a device program, not reported.
  int filter = bpf_prog_load(BPF_PROG_TYPE_SOCKET_FILTER, "gdw_test_sock", "GPL", accept, 2, nullptr);
  ASSERT_GE(filter, 0) << std::strerror(errno);
  ::close(filter);
  int device = load_allow_all_device_program();
  ASSERT_GE(device, 0) << std::strerror(errno);

  auto load = log_->wait_for<DeviceProgramLoadEvent>(
      [&](const DeviceProgramLoadEvent& e) { return e.caller.pid == ::getpid(); });
  ASSERT_TRUE(load);
  EXPECT_EQ(load->caller.comm, own_comm());
  EXPECT_GT(load->ktime_ns, 0u);
  EXPECT_EQ(log_->all<DeviceProgramLoadEvent>([&](const DeviceProgramLoadEvent& e) {
              return e.caller.pid == ::getpid();
            }).size(),
            1u)
      << "the socket filter was reported too";
  ::close(device);
}

// ---- the attach hook (cgroup v2) -------------------------------------------------------------

// The default probe: attaches of device programs to watched program cgroups are reported
// while the kernel installs them (tp_btf/kmalloc at the effective array's allocation),
// without the syscall hook; loads are not reported then.
class ProbeAttachHookTest : public ProbeDeviceProgramTest {
 protected:
  ProbeOptions options() const override { return {}; }

  void SetUp() override {
    ProbeDeviceProgramTest::SetUp();
    if (IsSkipped() || HasFatalFailure()) return;
    ASSERT_TRUE(probe_->attach_hook()) << "no attach hook on this kernel: " << probe_->attach_hook_problem();
    ASSERT_FALSE(probe_->syscall_hook_attached());
    ASSERT_TRUE(probe_->watch_program_cgroup(cgroup_id_));
  }

  std::vector<DeviceProgramEvent> attaching(std::uint64_t cgroup) {
    return log_->all<DeviceProgramEvent>([&](const DeviceProgramEvent& e) {
      return e.caller.pid == ::getpid() && e.attaching && e.target_cgroup_id == cgroup;
    });
  }
};

TEST_F(ProbeAttachHookTest, AnAttachToAWatchedCgroupIsReportedAsTheKernelInstallsIt) {
  ASSERT_EQ(bpf_prog_attach(first_prog_, cgroup_fd_, BPF_CGROUP_DEVICE, BPF_F_ALLOW_MULTI), 0);
  auto attach = log_->wait_for<DeviceProgramEvent>([&](const DeviceProgramEvent& e) {
    return e.caller.pid == ::getpid() && e.attaching && e.target_cgroup_id == cgroup_id_;
  });
  ASSERT_TRUE(attach) << "no attach record without the syscall hook";
  EXPECT_EQ(attach->command, DeviceProgramEvent::Command::kProgAttach);
  EXPECT_EQ(attach->prog_id, prog_id(first_prog_));
  EXPECT_EQ(attach->flags, static_cast<std::uint32_t>(BPF_F_ALLOW_MULTI));
  EXPECT_EQ(attach->caller.comm, own_comm());

  // A replacing attach names the program it replaces.
  struct bpf_prog_attach_opts opts {};
  opts.sz = sizeof(opts);
  opts.flags = BPF_F_ALLOW_MULTI | BPF_F_REPLACE;
  opts.replace_prog_fd = first_prog_;
  ASSERT_EQ(bpf_prog_attach_opts(second_prog_, cgroup_fd_, BPF_CGROUP_DEVICE, &opts), 0);
  auto replace = log_->wait_for<DeviceProgramEvent>([&](const DeviceProgramEvent& e) {
    return e.attaching && e.target_cgroup_id == cgroup_id_ && e.prog_id == prog_id(second_prog_);
  });
  ASSERT_TRUE(replace);
  EXPECT_EQ(replace->replaced_prog_id, prog_id(first_prog_));

  // A detach cannot revoke: not reported (the cgroup keeps one program, so the kernel
  // computes a new effective array for it all the same).
  ASSERT_EQ(bpf_prog_attach(first_prog_, cgroup_fd_, BPF_CGROUP_DEVICE, BPF_F_ALLOW_MULTI), 0);
  ASSERT_TRUE(log_->wait_for<DeviceProgramEvent>([&](const DeviceProgramEvent& e) {
    return e.attaching && e.target_cgroup_id == cgroup_id_ && e.prog_id == prog_id(first_prog_) &&
           e.replaced_prog_id == 0 && e.ktime_ns > replace->ktime_ns;
  }));
  const auto before = attaching(cgroup_id_).size();
  ASSERT_EQ(bpf_prog_detach2(first_prog_, cgroup_fd_, BPF_CGROUP_DEVICE), 0);
  ASSERT_EQ(bpf_prog_detach2(second_prog_, cgroup_fd_, BPF_CGROUP_DEVICE), 0);
  (void)log_->wait_for<DeviceProgramEvent>([](const DeviceProgramEvent&) { return false; },
                                          std::chrono::milliseconds(200));  // whatever came
  EXPECT_EQ(attaching(cgroup_id_).size(), before);
}

TEST_F(ProbeAttachHookTest, AnAttachElsewhereAndALoadAreNotReported) {
  const std::string other = sandbox_->make("other");
  const std::uint64_t other_id = inode_of(other);
  int other_fd = ::open(other.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  ASSERT_GE(other_fd, 0);
  ASSERT_EQ(bpf_prog_attach(first_prog_, other_fd, BPF_CGROUP_DEVICE, BPF_F_ALLOW_MULTI), 0);
  int loaded = load_allow_all_device_program();
  ASSERT_GE(loaded, 0);
  // A fence: an attach to the watched cgroup after both.
  ASSERT_EQ(bpf_prog_attach(second_prog_, cgroup_fd_, BPF_CGROUP_DEVICE, BPF_F_ALLOW_MULTI), 0);
  ASSERT_TRUE(log_->wait_for<DeviceProgramEvent>([&](const DeviceProgramEvent& e) {
    return e.attaching && e.target_cgroup_id == cgroup_id_ && e.prog_id == prog_id(second_prog_);
  }));
  EXPECT_TRUE(attaching(other_id).empty()) << "an unwatched cgroup's attach woke the daemon";
  EXPECT_TRUE(log_->all<DeviceProgramLoadEvent>([&](const DeviceProgramLoadEvent& e) {
                return e.caller.pid == ::getpid();
              }).empty())
      << "loads are not reported while the attaches are";
  ASSERT_EQ(bpf_prog_detach2(first_prog_, other_fd, BPF_CGROUP_DEVICE), 0);
  ASSERT_EQ(bpf_prog_detach2(second_prog_, cgroup_fd_, BPF_CGROUP_DEVICE), 0);
  ::close(loaded);
  ::close(other_fd);
}

TEST_F(ProbeAttachHookTest, ALinkToAWatchedCgroupIsReportedToo) {
  int link = bpf_link_create(first_prog_, cgroup_fd_, BPF_CGROUP_DEVICE, nullptr);
  ASSERT_GE(link, 0) << std::strerror(errno);
  auto created = log_->wait_for<DeviceProgramEvent>([&](const DeviceProgramEvent& e) {
    return e.attaching && e.target_cgroup_id == cgroup_id_ && e.command == DeviceProgramEvent::Command::kLinkCreate;
  });
  ASSERT_TRUE(created);
  EXPECT_EQ(created->prog_id, prog_id(first_prog_));
  ::close(link);
}

// ---- cgroup lifecycle -----------------------------------------------------------------------

TEST_F(ProbeTest, CgroupMkdirAndRmdir) {
  for (const char* hierarchy : {"devices", "unified"}) {
    SCOPED_TRACE(hierarchy);
    if (!CgroupSandbox::available(hierarchy)) continue;
    CgroupSandbox sandbox(hierarchy, "probe-life");
    std::string dir = sandbox.make("pod");
    std::uint64_t id = inode_of(dir);
    std::string rel = "/" + sandbox.name() + "/pod";
    sandbox.remove("pod");

    auto created = log_->wait_for<CgroupLifecycleEvent>(
        [&](const CgroupLifecycleEvent& e) { return e.created && e.cgroup_id == id && e.path == rel; });
    ASSERT_TRUE(created);
    EXPECT_EQ(created->level, 2);
    auto removed = log_->wait_for<CgroupLifecycleEvent>(
        [&](const CgroupLifecycleEvent& e) { return !e.created && e.cgroup_id == id && e.path == rel; });
    ASSERT_TRUE(removed);
    EXPECT_EQ(removed->hierarchy_id, created->hierarchy_id);
  }
}

TEST_F(ProbeTest, StatsCountDeliveredEventsAndNoDrops) {
  CgroupSandbox sandbox("devices", "probe-stats");
  std::string dir = sandbox.make("a");
  std::uint64_t id = inode_of(dir);
  ASSERT_TRUE(log_->wait_for<CgroupLifecycleEvent>([&](const CgroupLifecycleEvent& e) { return e.cgroup_id == id; }));
  ProbeStats stats = probe_->stats();
  EXPECT_GE(stats.events, 1u);
  EXPECT_EQ(stats.ring_buffer_drops, 0u);
}

}  // namespace
}  // namespace gdw
