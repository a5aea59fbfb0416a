// core/apply_wait.h: when a check waits for a runtime's apply to end, and how a wait ends.
#include "core/apply_wait.h"
#include "core/writer_name.h"

#include <gtest/gtest.h>

namespace gdw {
namespace {

using std::chrono::milliseconds;

const Clock::time_point t0 = Clock::time_point{} + std::chrono::hours(1);

ApplyWaitInputs writer(pid_t pid) {
  ApplyWaitInputs in;
  in.live_writer = pid;
  return in;
}

TEST(ApplyWait, NothingRunningNothingPendingGoesAheadAtOnce) {
  ApplyWaitState s;
  const auto d = decide_apply_wait(s, {}, t0, t0, {});
  EXPECT_FALSE(d.wait);
  EXPECT_FALSE(d.ended) << "no wait began, so none ended";
}

TEST(ApplyWait, ARunningRuntimeIsWaitedForUntilItExits) {
  ApplyWaitState s;
  auto d = decide_apply_wait(s, writer(4242), t0, t0, {});
  ASSERT_TRUE(d.wait);
  EXPECT_EQ(d.recheck_at, t0 + std::chrono::seconds(1)) << "its exit wakes the check; the limit at the latest";
  EXPECT_EQ(s.reason, ApplyWaitReason::kWriterExit);
  // A later trigger while it still runs: still waiting, the limit counted from the first.
  d = decide_apply_wait(s, writer(4242), t0 + milliseconds(3), t0 + milliseconds(3), {});
  ASSERT_TRUE(d.wait);
  EXPECT_EQ(d.recheck_at, t0 + std::chrono::seconds(1));
  // It exited.
  d = decide_apply_wait(s, {}, t0 + milliseconds(3), t0 + milliseconds(20), {});
  EXPECT_FALSE(d.wait);
  ASSERT_TRUE(d.ended);
  EXPECT_EQ(*d.ended, ApplyWaitReason::kWriterExit);
  EXPECT_FALSE(s.since) << "the next revocation starts a new wait";
}

TEST(ApplyWait, AWriterThatNeverExitsGetsTheGrantAtTheLimit) {
  ApplyWaitState s;
  ApplyWaitSettings settings;
  settings.limit = milliseconds(500);
  ASSERT_TRUE(decide_apply_wait(s, writer(7), t0, t0, settings).wait);
  const auto d = decide_apply_wait(s, writer(7), t0, t0 + milliseconds(500), settings);
  EXPECT_FALSE(d.wait);
  ASSERT_TRUE(d.ended);
  EXPECT_EQ(*d.ended, ApplyWaitReason::kLimit);
  EXPECT_EQ(s.reason, ApplyWaitReason::kWriterExit) << "what it waited for, for the log line";
}

TEST(ApplyWait, APendingCreateIsLookedAtAgainSoonAndEndsAsCreate) {
  ApplyWaitState s;
  ApplyWaitInputs in;
  in.create_pending = true;
  auto d = decide_apply_wait(s, in, t0, t0, {});
  ASSERT_TRUE(d.wait);
  EXPECT_EQ(d.recheck_at, t0 + ApplyWaitSettings{}.create_poll);
  d = decide_apply_wait(s, {}, t0, t0 + milliseconds(40), {});
  ASSERT_TRUE(d.ended);
  EXPECT_EQ(*d.ended, ApplyWaitReason::kCreate);
}

TEST(ApplyWait, AWatchedPidFileIsLookedForOnlyAsAFallback) {
  ApplyWaitState s;
  ApplyWaitInputs in;
  in.create_pending = true;
  in.create_watched = true;
  const ApplyWaitSettings settings;
  auto d = decide_apply_wait(s, in, t0, t0, settings);
  ASSERT_TRUE(d.wait);
  EXPECT_EQ(d.recheck_at, t0 + settings.create_poll_watched);
  EXPECT_GT(settings.create_poll_watched, settings.create_poll);
  // Never past the limit.
  d = decide_apply_wait(s, in, t0, t0 + settings.limit - milliseconds(1), settings);
  ASSERT_TRUE(d.wait);
  EXPECT_EQ(d.recheck_at, t0 + settings.limit);
}

TEST(ApplyWait, UnnamedWritesWaitUntilTheyGoQuiet) {
  ApplyWaitState s;
  ApplyWaitInputs write;
  write.unnamed_write = true;
  auto d = decide_apply_wait(s, write, t0, t0, {});
  ASSERT_TRUE(d.wait);
  EXPECT_EQ(d.recheck_at, t0 + milliseconds(5));
  // Another write 3 ms later moves the quiet end.
  d = decide_apply_wait(s, write, t0 + milliseconds(3), t0 + milliseconds(3), {});
  ASSERT_TRUE(d.wait);
  EXPECT_EQ(d.recheck_at, t0 + milliseconds(8));
  // The timer's look before then still waits; at it, the check goes ahead.
  EXPECT_TRUE(decide_apply_wait(s, {}, t0, t0 + milliseconds(7), {}).wait);
  d = decide_apply_wait(s, {}, t0, t0 + milliseconds(8), {});
  EXPECT_FALSE(d.wait);
  ASSERT_TRUE(d.ended);
  EXPECT_EQ(*d.ended, ApplyWaitReason::kQuiet);
}

TEST(ApplyWait, ALimitOfZeroNeverWaits) {
  ApplyWaitState s;
  ApplyWaitSettings off;
  off.limit = Clock::duration::zero();
  ApplyWaitInputs in = writer(9);
  in.create_pending = true;
  in.unnamed_write = true;
  EXPECT_FALSE(decide_apply_wait(s, in, t0, t0, off).wait);
}

TEST(ApplyWait, OnlyRuntimesAndHooksThatCheckTheirApplyAreWaitedFor) {
  for (const char* name : {"runc", "crun", "nvidia-container-toolkit"}) EXPECT_TRUE(writer_waited_for(name)) << name;
  // systemd never exits and checks nothing; an unknown writer is answered as before.
  for (const char* name : {"systemd", "kubelet", "containerd", "other", ""}) EXPECT_FALSE(writer_waited_for(name)) << name;
}

// A wait names its writer from the record's comms alone, which the kernel cuts at 15 bytes:
// the NVIDIA hook's processes (nvidia-container-runtime-hook, nvidia-container-cli) are
// "nvidia-containe" there, and are waited for.
TEST(ApplyWait, TheNvidiaHookIsWaitedForByItsCutComm) {
  EXPECT_TRUE(writer_waited_for(recognise_writer({"nvidia-containe", "runc", "", 4242})));
  EXPECT_TRUE(writer_waited_for(recognise_writer({"runc", "containerd-shim", "", 4243})));
  EXPECT_FALSE(writer_waited_for(recognise_writer({"nvidia-smi", "bash", "", 4244})));
}

}  // namespace
}  // namespace gdw
