// /healthz's decision: 200 while the event loop turned within the limit, 503 after.
#include <gtest/gtest.h>

#include "metrics/loop_health.h"

namespace gdw {
namespace {

using std::chrono::milliseconds;
using std::chrono::seconds;

const Clock::time_point kStart = Clock::time_point(seconds(1000));

TEST(LoopHealth, HealthyWithinTheLimitStaleAfter) {
  EXPECT_TRUE(judge_loop_health(kStart, kStart, seconds(30)).healthy);
  EXPECT_TRUE(judge_loop_health(kStart, kStart + seconds(30), seconds(30)).healthy) << "the limit itself is fine";
  const auto late = judge_loop_health(kStart, kStart + seconds(30) + milliseconds(1), seconds(30));
  EXPECT_FALSE(late.healthy);
  EXPECT_EQ(late.since_turn, seconds(30) + milliseconds(1));
}

TEST(LoopHealth, ABeatReadAfterNowCountsAsNow) {
  const auto h = judge_loop_health(kStart + milliseconds(5), kStart, seconds(1));
  EXPECT_TRUE(h.healthy);
  EXPECT_EQ(h.since_turn, Clock::duration::zero());
}

TEST(LoopHealth, NeverTurnedIsUnhealthy) {
  EXPECT_FALSE(judge_loop_health(Clock::time_point{}, kStart, seconds(30)).healthy);
  LoopHeartbeat never;
  never.set_stale_after(seconds(30));
  EXPECT_EQ(never.answer(kStart).status, 503);
}

TEST(LoopHealth, ResponsesSayWhy) {
  auto ok = health_response(judge_loop_health(kStart, kStart + milliseconds(250), seconds(30)), seconds(30));
  EXPECT_EQ(ok.status, 200);
  EXPECT_EQ(ok.body, "ok: event loop last turned 0.250s ago (limit 30.000s)\n");
  auto stalled = health_response(judge_loop_health(kStart, kStart + seconds(42), seconds(30)), seconds(30));
  EXPECT_EQ(stalled.status, 503);
  EXPECT_EQ(stalled.body, "stalled: event loop last turned 42.000s ago (limit 30.000s)\n");
}

TEST(LoopHeartbeat, TheLatestBeatAndLimitDecide) {
  LoopHeartbeat hb;
  hb.set_stale_after(seconds(2));
  hb.beat(kStart);
  EXPECT_EQ(hb.last(), kStart);
  EXPECT_EQ(hb.answer(kStart + seconds(1)).status, 200);
  EXPECT_EQ(hb.answer(kStart + seconds(3)).status, 503);
  hb.beat(kStart + seconds(3));
  EXPECT_EQ(hb.answer(kStart + seconds(3)).status, 200);
  hb.set_stale_after(milliseconds(100));  // a reload that shortens the limit
  EXPECT_EQ(hb.answer(kStart + seconds(4)).status, 503);
}

}  // namespace
}  // namespace gdw
