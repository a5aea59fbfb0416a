// daemon.event_loop_fifo_priority on the real daemon: its event loop thread, and only that
// thread, runs under SCHED_FIFO, marked to reset on fork (a helper it starts is a fair task
// again); a SIGHUP that sets 0 makes it a fair task with the configured slice again.
// Root: SCHED_FIFO needs CAP_SYS_NICE.
#include <gtest/gtest.h>
#include <sched.h>
#include <signal.h>
#include <unistd.h>

#include <chrono>
#include <cstdint>
#include <filesystem>
#include <string>

#include "kubelet/checkpoint.h"
#include "watch/loop_slice.h"
#include "support/process.h"
#include "support/temp_dir.h"

namespace gdw {
namespace {

using namespace std::chrono_literals;

ThreadScheduling attr_of(pid_t tid) {
  auto read = read_thread_scheduling(tid);
  EXPECT_TRUE(read) << "thread " << tid << ": " << (read ? "" : read.error().message);
  return read ? *read : ThreadScheduling{};
}

// Every thread of `pid` but the main one (the event loop's).
std::vector<pid_t> other_threads(pid_t pid) {
  std::vector<pid_t> tids;
  for (const auto& e : std::filesystem::directory_iterator("/proc/" + std::to_string(pid) + "/task")) {
    const pid_t tid = std::stoi(e.path().filename().string());
    if (tid != pid) tids.push_back(tid);
  }
  return tids;
}

TEST(LoopFifo, OnlyTheLoopThreadRunsUnderFifoAndASighupMakesItFairAgain) {
  if (::geteuid() != 0) GTEST_SKIP() << "needs root (CAP_SYS_NICE for SCHED_FIFO)";
  test::TempDir dir("gdw-loop-fifo");
  dir.mkdirs("cgroup/devices/kubepods");
  dir.write("kubelet/kubelet_internal_checkpoint", write_checkpoint({}, {}));
  const std::string base = "cgroup:\n  root: " + dir / "cgroup" + "\nkubelet:\n  checkpoint: " +
                           dir / "kubelet/kubelet_internal_checkpoint" + "\nmetrics:\n  listen: ''\nprobe:\n  enabled: false\n";
  const std::string config = dir.write("config.yaml", base + "daemon:\n  event_loop_fifo_priority: 3\n");
  test::BackgroundProcess daemon({GDW_BINARY, "run", "--config", config});
  ASSERT_TRUE(daemon.wait_for_output("SCHED_FIFO priority 3")) << daemon.output();

  const ThreadScheduling loop = attr_of(daemon.pid());
  EXPECT_EQ(loop.policy, static_cast<std::uint32_t>(SCHED_FIFO));
  EXPECT_EQ(loop.priority, 3u);
  EXPECT_TRUE(loop.reset_on_fork) << "SCHED_FLAG_RESET_ON_FORK";
  const auto others = other_threads(daemon.pid());
  EXPECT_FALSE(others.empty());
  for (pid_t tid : others) {
    const std::uint32_t policy = attr_of(tid).policy;
    EXPECT_TRUE(policy == SCHED_OTHER || policy == SCHED_BATCH) << "thread " << tid << " policy " << policy;
  }

  test::write_file(config, base + "daemon:\n  event_loop_fifo_priority: 0\n  event_loop_slice_us: 2000\n");
  daemon.signal(SIGHUP);
  ASSERT_TRUE(daemon.wait_for_output("scheduler slice 2000 us")) << daemon.output();
  const ThreadScheduling fair = attr_of(daemon.pid());
  EXPECT_EQ(fair.policy, static_cast<std::uint32_t>(SCHED_OTHER));
  EXPECT_EQ(fair.priority, 0u);
  EXPECT_EQ(fair.slice_ns, 2000000u);

  daemon.signal(SIGTERM);
  EXPECT_EQ(daemon.wait(10s), 0) << daemon.output();
}

TEST(LoopFifo, AnOutOfRangePriorityIsRefusedAtStart) {
  test::TempDir dir("gdw-loop-fifo-bad");
  const std::string config = dir.write("config.yaml", "daemon:\n  event_loop_fifo_priority: 100\n");
  test::BackgroundProcess check({GDW_BINARY, "run", "--config", config});
  EXPECT_NE(check.wait(10s), 0);
  EXPECT_NE(check.output().find("daemon.event_loop_fifo_priority"), std::string::npos) << check.output();
}

}  // namespace
}  // namespace gdw
