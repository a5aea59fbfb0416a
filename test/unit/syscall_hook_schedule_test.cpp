#include "core/syscall_hook_schedule.h"

#include <gtest/gtest.h>

namespace gdw {
namespace {

using namespace std::chrono_literals;

const Clock::time_point t0 = Clock::time_point{} + 1h;

TEST(SyscallHookSchedule, OnDriftAttachesWhileMissingAndForTheLingerAfter) {
  SyscallHookSchedule s(SyscallHookPolicy::kOnDrift, 30s, /*rule_writes_need_hook=*/false);
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
  SyscallHookSchedule s(SyscallHookPolicy::kOnDrift, 30s, false);
  s.update(true, t0);
  s.update(false, t0 + 1s);
  EXPECT_TRUE(s.update(true, t0 + 20s).attached);
  auto healed = s.update(false, t0 + 25s);
  EXPECT_EQ(*healed.recheck_at, t0 + 55s);
  EXPECT_TRUE(s.update(false, t0 + 50s).attached);
}

TEST(SyscallHookSchedule, ZeroLingerDetachesAtOnce) {
  SyscallHookSchedule s(SyscallHookPolicy::kOnDrift, 0ms, false);
  EXPECT_TRUE(s.update(true, t0).attached);
  EXPECT_FALSE(s.update(false, t0 + 1ms).attached);
}

TEST(SyscallHookSchedule, AlwaysAndOffIgnoreDrift) {
  SyscallHookSchedule always(SyscallHookPolicy::kAlways, 30s, false);
  EXPECT_TRUE(always.update(false, t0).attached);
  EXPECT_TRUE(always.update(true, t0).attached);
  SyscallHookSchedule off(SyscallHookPolicy::kOff, 30s, true);
  EXPECT_FALSE(off.update(true, t0).attached);
  EXPECT_FALSE(off.update(false, t0).attached);
}

TEST(SyscallHookSchedule, AutoIsOnDriftUnlessRuleWritesNeedTheHook) {
  SyscallHookSchedule capable(SyscallHookPolicy::kAuto, 30s, /*rule_writes_need_hook=*/false);
  EXPECT_FALSE(capable.update(false, t0).attached);
  EXPECT_TRUE(capable.update(true, t0).attached);
  SyscallHookSchedule old_kernel(SyscallHookPolicy::kAuto, 30s, /*rule_writes_need_hook=*/true);
  EXPECT_TRUE(old_kernel.update(false, t0).attached) << "without it no writer would ever be named";
}

// Issue 39, 3: on a cgroup v2 node there are no rule writes to see, so an old kernel's
// need of the hook for them keeps nothing attached; before the node is located it still
// counts (rule_files defaults to true), and the owner decides again once it is.
TEST(SyscallHookSchedule, OnACgroupV2NodeAutoIsOnDriftWhateverTheKernel) {
  SyscallHookSchedule v2(SyscallHookPolicy::kAuto, 30s, /*rule_writes_need_hook=*/true, /*observe=*/false,
                         /*rule_files=*/false);
  const auto idle = v2.update(false, t0);
  EXPECT_FALSE(idle.attached) << idle.reason;
  EXPECT_TRUE(v2.update(true, t0 + 1s).attached) << "a GPU container missing devices: its opens fail";
  SyscallHookSchedule unknown(SyscallHookPolicy::kAuto, 30s, /*rule_writes_need_hook=*/true);
  EXPECT_TRUE(unknown.update(false, t0).attached) << "not located yet: rule files may be there";
  SyscallHookSchedule forced(SyscallHookPolicy::kAlways, 30s, true, false, /*rule_files=*/false);
  EXPECT_TRUE(forced.update(false, t0).attached) << "an explicit policy is kept";
}

TEST(SyscallHookSchedule, AutoIsAlwaysInObserveModeSoTheFirstDeniedOpensCount) {
  SyscallHookSchedule observe(SyscallHookPolicy::kAuto, 30s, /*rule_writes_need_hook=*/false, /*observe=*/true);
  const auto before_any_drift = observe.update(false, t0);
  EXPECT_TRUE(before_any_drift.attached);
  EXPECT_NE(std::string(before_any_drift.reason).find("observe mode"), std::string::npos) << before_any_drift.reason;
  SyscallHookSchedule on_drift(SyscallHookPolicy::kOnDrift, 30s, false, /*observe=*/true);
  EXPECT_FALSE(on_drift.update(false, t0).attached) << "an explicit policy is kept";
}

}  // namespace
}  // namespace gdw
