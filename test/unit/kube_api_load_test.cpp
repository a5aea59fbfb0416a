// What the daemon asks of the API server, in memory: back-offs drawn with jitter around
// their doubling (so that a fleet that failed together does not retry together), at least
// the server's Retry-After, and the node writes of one healthy hour (the first check, then
// one re-assert every conditions.resync).
#include <gtest/gtest.h>

#include <set>

#include "kube/backoff.h"
#include "kube/status_planner.h"

namespace gdw::kube {
namespace {

using namespace std::chrono_literals;

TEST(KubeBackoff, DoublesUpToItsMaximumWithJitterAroundEachStep) {
  Backoff exact(1s, 30s, 0, 1);
  for (auto want : {1s, 2s, 4s, 8s, 16s, 30s, 30s}) EXPECT_EQ(exact.next(), Backoff::duration(want));
  exact.reset();
  EXPECT_EQ(exact.next(), Backoff::duration(1s));

  // 1,000 nodes failing at once: their first retries spread over [0.5 s, 1.5 s).
  std::set<long> tenths;
  for (std::uint64_t node = 1; node <= 1000; ++node) {
    Backoff b(1s, 30s, 1.0, node);
    const auto d = b.next();
    EXPECT_GE(d, Backoff::duration(500ms));
    EXPECT_LT(d, Backoff::duration(1500ms));
    tenths.insert(std::chrono::duration_cast<std::chrono::milliseconds>(d).count() / 100);
  }
  EXPECT_EQ(tenths.size(), 10u) << "every tenth of a second of the window is used";
}

TEST(KubeBackoff, RetryAfterIsTheLeastWait) {
  Backoff b(1s, 30s, 0, 1);
  EXPECT_EQ(b.next(std::chrono::seconds(7)), Backoff::duration(7s));
  EXPECT_EQ(b.next(std::chrono::seconds(1)), Backoff::duration(2s)) << "the back-off when longer";
  EXPECT_EQ(parse_retry_after(" 120\r\n"), 120s);
  EXPECT_EQ(parse_retry_after("0"), 0s);
  EXPECT_EQ(parse_retry_after("86400"), 600s) << "capped";
  EXPECT_FALSE(parse_retry_after("Wed, 21 Oct 2015 07:28:00 GMT"));
  EXPECT_FALSE(parse_retry_after("-1"));
  EXPECT_FALSE(parse_retry_after(""));
}

TEST(KubeApiLoad, AHealthyHourWritesTheNodeTwelveTimes) {
  const Clock::time_point t0 = Clock::time_point{} + std::chrono::hours(1000);
  const WallClock::time_point w0 = WallClock::time_point{} + std::chrono::seconds(1'800'000'000);
  StatusOptions o;
  o.node_path = "/api/v1/nodes/n1/status";
  StatusPlanner p(o);
  int reads = 0, writes = 0;
  for (auto t = 0s; t < 3600s; t += 1s) {
    if (t == 0s) p.observe({{}, false, {}, true}, t0);
    for (const auto& w : p.plan(t0 + t, w0 + t)) {
      if (w.read) {
        ++reads;
        p.node_read({}, t0 + t);
      } else {
        ++writes;
        p.written(w, true, t0 + t);
      }
    }
  }
  EXPECT_EQ(reads, 1);
  EXPECT_EQ(writes, 12) << "the first check's write, then one every 5 minutes";
}

}  // namespace
}  // namespace gdw::kube
