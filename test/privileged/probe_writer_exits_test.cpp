// The probe's writer exits (bpf/devwatch_writer_exits.bpf.h), on the real kernel: a process
// whose exit is awaited is reported once every thread of it has entered do_exit (no sooner:
// a thread still running could still write), a process nobody awaits is not, and a writer
// the probe named in a record is awaited without being asked.
#include <pthread.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <string>

#include <gtest/gtest.h>

#include "support/cgroup_sandbox.h"
#include "support/probe_fixture.h"

namespace gdw {
namespace {

using namespace std::chrono_literals;
using test::CgroupSandbox;
using test::ProbeTest;

// A child of two threads: the first (the group leader) exits alone when `leader_go` is
// written, the second ends the process when `last_go` is.
struct TwoThreadChild {
  pid_t pid = -1;
  int leader_go = -1;
  int last_go = -1;

  TwoThreadChild() {
    int leader[2], last[2];
    if (::pipe2(leader, O_CLOEXEC) != 0 || ::pipe2(last, O_CLOEXEC) != 0) return;
    pid = ::fork();
    if (pid == 0) {
      ::close(leader[1]);  // so that the parent closing its ends is an EOF here
      ::close(last[1]);
      static int last_read_fd;
      last_read_fd = last[0];
      pthread_t second;
      auto wait_then_end = [](void*) -> void* {
        char c;
        (void)!::read(last_read_fd, &c, 1);
        ::_exit(0);  // exit_group: this thread is the last one by now
      };
      if (pthread_create(&second, nullptr, wait_then_end, nullptr) != 0) ::_exit(1);
      char c;
      (void)!::read(leader[0], &c, 1);
      ::syscall(SYS_exit, 0);  // this thread only: the process goes on in the second
    }
    ::close(leader[0]);
    ::close(last[0]);
    leader_go = leader[1];
    last_go = last[1];
  }
  ~TwoThreadChild() {
    if (leader_go >= 0) ::close(leader_go);
    if (last_go >= 0) ::close(last_go);
    if (pid > 0) ::waitpid(pid, nullptr, 0);
  }
  // The state of one of its threads (R, S, Z, ...); '?' when it cannot be read.
  char state_of(pid_t tid) const {
    const std::string stat = test::read_file("/proc/" + std::to_string(pid) + "/task/" + std::to_string(tid) + "/stat");
    const auto after_comm = stat.rfind(')');
    return after_comm == std::string::npos || after_comm + 2 >= stat.size() ? '?' : stat[after_comm + 2];
  }
  int threads() const {
    const std::string status = test::read_file("/proc/" + std::to_string(pid) + "/status");
    const auto at = status.find("Threads:");
    return at == std::string::npos ? -1 : std::stoi(status.substr(at + 8));
  }
};

TEST_F(ProbeTest, AnAwaitedWriterIsReportedOnceItsLastThreadHasExited) {
  TwoThreadChild child;
  ASSERT_GT(child.pid, 0);
  ASSERT_TRUE(test::eventually([&] { return child.threads() == 2; }, 5s));
  ASSERT_TRUE(probe_->await_writer_exit(child.pid));
  const pid_t pid = child.pid;
  auto of_child = [pid](const WriterExitEvent& e) { return e.pid == pid; };

  ASSERT_EQ(::write(child.leader_go, "x", 1), 1);
  // The leader stays a zombie (and counted) until the whole group has died.
  ASSERT_TRUE(test::eventually([&] { return child.state_of(child.pid) == 'Z'; }, 5s)) << "the group leader did not exit";
  EXPECT_FALSE(log_->wait_for<WriterExitEvent>(of_child, 300ms))
      << "reported while a thread of the writer still ran";

  ASSERT_EQ(::write(child.last_go, "x", 1), 1);
  EXPECT_TRUE(log_->wait_for<WriterExitEvent>(of_child, 3s)) << "the writer's exit was not reported";
  ASSERT_EQ(::waitpid(child.pid, nullptr, 0), child.pid);
  child.pid = -1;
  EXPECT_EQ(log_->all<WriterExitEvent>(of_child).size(), 1u) << "reported more than once";
}

TEST_F(ProbeTest, AProcessNobodyAwaitsIsNotReportedAsItExits) {
  const pid_t pid = ::fork();
  if (pid == 0) ::_exit(0);
  ASSERT_GT(pid, 0);
  ASSERT_EQ(::waitpid(pid, nullptr, 0), pid);
  EXPECT_FALSE(log_->wait_for<WriterExitEvent>([&](const WriterExitEvent& e) { return e.pid == pid; }, 300ms));
}

// The daemon decides to wait tens of microseconds after the record that named a runtime; by
// then the runtime may be exiting. So the probe awaits every writer it names itself.
TEST_F(ProbeTest, ARuleWriterIsReportedAsItExitsWithoutBeingAwaited) {
  if (!test::CgroupSandbox::available("devices")) GTEST_SKIP() << "no cgroup v1 devices hierarchy";
  CgroupSandbox sandbox("devices", "probe-exit");
  const std::string target = sandbox.make("target");
  const std::string writer_cgroup = sandbox.make("writer");
  const test::WriterRun run =
      test::write_rule_from_child(writer_cgroup, target + "/devices.deny", "c 195:3 rwm\n", test::WriteCall::kWrite);
  ASSERT_EQ(run.result, 12) << "the rule write itself failed";
  EXPECT_TRUE(log_->wait_for<RuleWriteEvent>([&](const RuleWriteEvent& e) { return e.writer.pid == run.pid; }));
  EXPECT_TRUE(log_->wait_for<WriterExitEvent>([&](const WriterExitEvent& e) { return e.pid == run.pid; }))
      << "the writer " << run.pid << " exited unreported";
}

}  // namespace
}  // namespace gdw
