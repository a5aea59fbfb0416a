// The event loop's scheduler slice (watch/loop_slice.h, daemon.event_loop_slice_us) on this
// machine's kernel, without root: a thread of our own asks for it, and the real daemon's
// loop runs with it, from the default configuration and after SIGHUP.
#include <gtest/gtest.h>
#include <sched.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/utsname.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <chrono>
#include <fstream>
#include <thread>

#include "kubelet/checkpoint.h"
#include "support/process.h"
#include "support/temp_dir.h"
#include "watch/loop_slice.h"

namespace gdw {
namespace {

using namespace std::chrono_literals;

// EEVDF takes a per-thread slice from Linux 6.12 on.
bool kernel_takes_slices() {
  utsname u{};
  ::uname(&u);
  int major = 0, minor = 0;
  std::sscanf(u.release, "%d.%d", &major, &minor);
  return major > 6 || (major == 6 && minor >= 12);
}

// Runs `body` on a thread of its own: scheduling attributes are per thread, and the test
// runner's own must stay as they were.
template <class F>
void on_own_thread(F body) {
  std::thread t(body);
  t.join();
}

TEST(LoopSlice, OnlyTheDefaultPolicyIsChanged) {
  EXPECT_TRUE(decide_slice({SCHED_OTHER, 5, 2800000}).request);
  for (std::uint32_t policy : {SCHED_BATCH, SCHED_IDLE, SCHED_FIFO, SCHED_RR}) {
    const SliceDecision d = decide_slice({policy, 0, 0});
    EXPECT_FALSE(d.request) << policy;
    EXPECT_NE(d.reason.find("an operator's choice"), std::string::npos) << d.reason;
  }
}

TEST(LoopSlice, AShortSliceKeepsPolicyAndNice) {
  on_own_thread([] {
    ASSERT_EQ(::setpriority(PRIO_PROCESS, static_cast<id_t>(::gettid()), 3), 0);
    auto slice = request_loop_slice(100us);
    auto now = read_thread_scheduling();
    ASSERT_TRUE(now) << now.error().message;
    EXPECT_EQ(now->policy, static_cast<std::uint32_t>(SCHED_OTHER));
    EXPECT_EQ(now->nice, 3);
    if (!kernel_takes_slices()) {
      ASSERT_FALSE(slice);
      EXPECT_EQ(slice.error().code, ENOTSUP) << slice.error().message;
      return;
    }
    ASSERT_TRUE(slice) << slice.error().message;
    EXPECT_EQ(*slice, 100000u);
    EXPECT_EQ(now->slice_ns, 100000u);

    // 0 gives the kernel's default back.
    auto back = request_loop_slice(0us);
    ASSERT_TRUE(back) << back.error().message;
    EXPECT_GT(*back, 100000u);
    EXPECT_EQ(read_thread_scheduling()->nice, 3);
  });
}

TEST(LoopSlice, AnOperatorsPolicyIsLeftAsItIs) {
  on_own_thread([] {
    sched_param param{};
    ASSERT_EQ(::sched_setscheduler(0, SCHED_BATCH, &param), 0) << std::strerror(errno);
    const auto before = read_thread_scheduling();
    ASSERT_TRUE(before);
    auto slice = request_loop_slice(100us);
    ASSERT_FALSE(slice);
    EXPECT_NE(slice.error().message.find("SCHED_BATCH"), std::string::npos) << slice.error().message;
    const auto after = read_thread_scheduling();
    ASSERT_TRUE(after);
    EXPECT_EQ(after->policy, static_cast<std::uint32_t>(SCHED_BATCH));
    EXPECT_EQ(after->slice_ns, before->slice_ns);
  });
}

// se.slice of the process's main thread, in nanoseconds (-1: not shown).
long main_thread_slice(pid_t pid) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/sched");
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind("se.slice", 0) != 0) continue;
    return std::stol(line.substr(line.find(':') + 1));
  }
  return -1;
}

TEST(LoopSlice, TheDaemonsLoopRunsWithTheConfiguredSlice) {
  if (!kernel_takes_slices()) GTEST_SKIP() << "Linux before 6.12 keeps its own slice";
  test::TempDir dir("gdw-loop-slice");
  dir.mkdirs("cgroup/devices/kubepods");
  dir.write("kubelet/kubelet_internal_checkpoint", write_checkpoint({}, {}));
  const std::string base = "cgroup:\n  root: " + dir / "cgroup" + "\nkubelet:\n  checkpoint: " +
                           dir / "kubelet/kubelet_internal_checkpoint" + "\nmetrics:\n  listen: ''\nprobe:\n  enabled: false\n";
  const std::string config = dir.write("config.yaml", base);
  test::BackgroundProcess daemon({GDW_BINARY, "run", "--config", config});
  ASSERT_TRUE(daemon.wait_for_output("scheduler slice 100 us")) << daemon.output();
  EXPECT_EQ(main_thread_slice(daemon.pid()), 100000);

  test::write_file(config, base + "daemon:\n  event_loop_slice_us: 2000\n");
  daemon.signal(SIGHUP);
  ASSERT_TRUE(daemon.wait_for_output("scheduler slice 2000 us")) << daemon.output();
  EXPECT_EQ(main_thread_slice(daemon.pid()), 2000000);

  test::write_file(config, base + "daemon:\n  event_loop_slice_us: 0\n");
  daemon.signal(SIGHUP);
  ASSERT_TRUE(daemon.wait_for_output("the kernel's default scheduler slice")) << daemon.output();
  EXPECT_GT(main_thread_slice(daemon.pid()), 0);
  EXPECT_NE(main_thread_slice(daemon.pid()), 2000000);
  daemon.signal(SIGTERM);
  EXPECT_EQ(daemon.wait(10s), 0) << daemon.output();
}

}  // namespace
}  // namespace gdw
