#include "core/syscall_hook_schedule.h"

#include <gtest/gtest.h>

namespace gdw {
namespace {

using namespace std::chrono_literals;

const Clock::time_point t0 = Clock::time_point{} + 1h;

TEST(SyscallHookSchedule, OnDriftAttachesWhileMissingAndForTheLingerAfter) {
  SyscallHookSchedule s(SyscallHookPolicy::kOnDrift, 30s);
  EXPECT_FALSE(s.update(false, t0).attached) << "nothing missing: detached";

  auto missing = s.update(true, t0 + 1s);
  EXPECT_TRUE(missing.attached);
  EXPECT_FALSE(missing.recheck_at);
  EXPECT_TRUE(s.update(true, t0 + 5s).attached);

  auto healed = s.update(false, t0 + 10s);
  EXPECT_TRUE(healed.attached) << "lingers after the drift ends";
  ASSERT_TRUE(healed.recheck_at);
  EXPECT_EQ(*healed.recheck_at, t0 + 40s);
  EXPECT_TRUE(s.update(false, t0 + 39s).attached);
  EXPECT_EQ(*s.update(false, t0 + 39s).recheck_at, t0 + 40s) << "the linger counts from the end of the drift";

  auto done = s.update(false, t0 + 40s);
  EXPECT_FALSE(done.attached);
  EXPECT_FALSE(done.recheck_at);
  EXPECT_FALSE(s.update(false, t0 + 100s).attached);
}

TEST(SyscallHookSchedule, DriftDuringTheLingerRestartsIt) {
  SyscallHookSchedule s(SyscallHookPolicy::kOnDrift, 30s);
  s.update(true, t0);
  s.update(false, t0 + 1s);
  EXPECT_TRUE(s.update(true, t0 + 20s).attached);
  auto healed = s.update(false, t0 + 25s);
  EXPECT_EQ(*healed.recheck_at, t0 + 55s);
  EXPECT_TRUE(s.update(false, t0 + 50s).attached);
}

TEST(SyscallHookSchedule, ZeroLingerDetachesAtOnce) {
  SyscallHookSchedule s(SyscallHookPolicy::kOnDrift, 0ms);
  EXPECT_TRUE(s.update(true, t0).attached);
  EXPECT_FALSE(s.update(false, t0 + 1ms).attached);
}

TEST(SyscallHookSchedule, AlwaysAndOffIgnoreDrift) {
  SyscallHookSchedule always(SyscallHookPolicy::kAlways, 30s);
  EXPECT_TRUE(always.update(false, t0).attached);
  EXPECT_TRUE(always.update(true, t0).attached);
  SyscallHookSchedule off(SyscallHookPolicy::kOff, 30s, /*observe=*/true);
  EXPECT_FALSE(off.update(true, t0).attached);
  EXPECT_FALSE(off.update(false, t0).attached);
}

// Issue 39, 3: no kernel makes the default keep a per-syscall hook attached for good. A
// cgroup v2 node has no rule writes to see; on cgroup v1 before 6.14 rule writers are named
// on the write path (fexit) where the kernel allows it, and their attribution degrades
// where it does not: not paid for with every syscall of the node.
TEST(SyscallHookSchedule, AutoIsOnDriftOnEveryKernel) {
  SyscallHookSchedule s(SyscallHookPolicy::kAuto, 30s);
  const auto idle = s.update(false, t0);
  EXPECT_FALSE(idle.attached) << idle.reason;
  EXPECT_TRUE(s.update(true, t0 + 1s).attached) << "a GPU container missing devices: its opens fail";
}

TEST(SyscallHookSchedule, AutoIsAlwaysInObserveModeSoTheFirstDeniedOpensCount) {
  SyscallHookSchedule observe(SyscallHookPolicy::kAuto, 30s, /*observe=*/true);
  const auto before_any_drift = observe.update(false, t0);
  EXPECT_TRUE(before_any_drift.attached);
  EXPECT_NE(std::string(before_any_drift.reason).find("observe mode"), std::string::npos) << before_any_drift.reason;
  SyscallHookSchedule on_drift(SyscallHookPolicy::kOnDrift, 30s, /*observe=*/true);
  EXPECT_FALSE(on_drift.update(false, t0).attached) << "an explicit policy is kept";
}

}  // namespace
}  // namespace gdw
