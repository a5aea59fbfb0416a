// The fight-loop guard and the repair log limit, driven with synthetic clocks: what a
// re-applier at a given rate gets (every repair at once, or delayed), and which repairs get
// a log line.
#include "core/repair_policy.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <optional>

#include "core/config.h"

namespace gdw {
namespace {

using namespace std::chrono_literals;

const Clock::time_point t0 = Clock::time_point{} + 1h;

struct ReapplyResult {
  std::uint64_t repairs = 0;
  std::uint64_t delayed = 0;
  std::optional<Clock::duration> first_delay_at;  // since the start
};

// One re-applier revoking `per_second` times a second for `seconds`; the daemon repairs each
// revocation when the budget gives a token.
ReapplyResult reapply(RepairBudget& b, double per_second, double seconds, Clock::time_point start = t0) {
  ReapplyResult r;
  const auto period = std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(1.0 / per_second));
  const auto n = static_cast<std::uint64_t>(per_second * seconds);
  for (std::uint64_t i = 0; i < n; ++i) {
    const auto now = start + static_cast<std::int64_t>(i) * period;
    if (b.acquire(now) == Clock::duration::zero()) {
      ++r.repairs;
    } else {
      ++r.delayed;
      if (!r.first_delay_at) r.first_delay_at = now - start;
    }
  }
  return r;
}

RepairBudget default_budget() {
  const Config defaults;
  return RepairBudget(defaults.repair.burst, defaults.repair.max_per_minute);
}

// What real re-appliers produce never meets the guard with the default config.
TEST(RepairBudget, DefaultsNeverDelayRealReappliers) {
  struct Case {
    const char* what;
    double per_second;
    double seconds;
  } cases[] = {
      {"200 re-applies/s for 5 s (the bench's fight case)", 200, 5},
      {"200 re-applies/s for 20 s", 200, 20},
      {"100 re-applies/s for 45 s", 100, 45},
      {"systemd reload storm: 100 reloads back to back, one re-apply each", 1000, 0.1},
      {"CPUManager reconcile every 10 s, for a day", 0.1, 86400},
      {"CPUManager reconcile every second, for an hour", 1, 3600},
      {"a writer at the sustained rate, for an hour", 20, 3600},
  };
  for (const auto& c : cases) {
    RepairBudget b = default_budget();
    const ReapplyResult r = reapply(b, c.per_second, c.seconds);
    EXPECT_EQ(r.delayed, 0u) << c.what << ": first delayed after "
                             << (r.first_delay_at ? std::chrono::duration<double>(*r.first_delay_at).count() : 0) << " s";
    EXPECT_GT(r.repairs, 0u) << c.what;
    EXPECT_FALSE(b.exhausted(t0 + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(c.seconds))))
        << c.what;
  }
}

// An endless loop is caught: when, at which rate (burst / (rate - 20/s) with the defaults).
TEST(RepairBudget, DefaultsEngageOnlyForASustainedEndlessLoop) {
  struct Case {
    double per_second;
    double engages_after_s;  // expected, +- 5 %
  } cases[] = {{200, 33.3}, {100, 75.0}, {2000, 3.03}, {10000, 0.601}};
  for (const auto& c : cases) {
    RepairBudget b = default_budget();
    const double seconds = c.engages_after_s * 1.5;
    const ReapplyResult r = reapply(b, c.per_second, seconds);
    ASSERT_TRUE(r.first_delay_at) << c.per_second << "/s never engaged the guard";
    const double at = std::chrono::duration<double>(*r.first_delay_at).count();
    EXPECT_NEAR(at, c.engages_after_s, c.engages_after_s * 0.05) << c.per_second << "/s";
    // Once engaged, repairs go at the sustained rate (20/s), no faster.
    const Clock::time_point end = t0 + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(seconds));
    EXPECT_TRUE(b.exhausted(end)) << c.per_second << "/s";
    const double after_engaging = seconds - at;
    const double repaired_after = static_cast<double>(r.repairs) - 6000.0 - 20.0 * at;
    EXPECT_NEAR(repaired_after, 20.0 * after_engaging, 20.0 * after_engaging * 0.1 + 2) << c.per_second << "/s";
  }
}

TEST(RepairBudget, ADelayedRepairIsToldWhenTheNextTokenComes) {
  RepairBudget b(2, 60);  // one a second after two
  EXPECT_EQ(b.acquire(t0), Clock::duration::zero());
  EXPECT_EQ(b.acquire(t0), Clock::duration::zero());
  EXPECT_TRUE(b.exhausted(t0));
  const auto wait = b.acquire(t0 + 250ms);
  EXPECT_GT(wait, 740ms);
  EXPECT_LE(wait, 750ms);
  EXPECT_EQ(b.next_token_at(t0 + 250ms), t0 + 250ms + wait) << "what the deferred repair waits for";
  EXPECT_EQ(b.acquire(t0 + 1s), Clock::duration::zero()) << "repaired once the token is there";
  EXPECT_FALSE(b.exhausted(t0 + 3s)) << "the guard lets go once the loop stops";
  EXPECT_EQ(b.next_token_at(t0 + 3s), t0 + 3s);
  EXPECT_EQ(b.acquire(t0 + 3s), Clock::duration::zero());
  EXPECT_EQ(b.acquire(t0 + 3s), Clock::duration::zero());
  EXPECT_GT(b.acquire(t0 + 3s), Clock::duration::zero()) << "refilled to the burst, not beyond";
}

// Log lines: which repairs of a container get one, and what the next line says.
TEST(RepairLogLimit, LogsTheBurstThenOneLinePerIntervalWithTheCount) {
  RepairLogLimit l(3, 10s);
  struct Step {
    Clock::duration at;
    bool log;
    std::uint64_t unlogged;  // when logged
    std::optional<Clock::duration> summary_at;
  } steps[] = {
      {0ms, true, 0, {}},         {1ms, true, 0, {}},    {2ms, true, 0, {}},
      {3ms, false, 0, 10s},       // the first line spent at 0 comes back at 10 s
      {4ms, false, 0, {}},        // summary already owed
      {5s, false, 0, {}},         {10s, true, 3, {}},    // carries the three not logged
      {10s + 1ms, false, 0, 20s}, {25s, true, 1, {}},    // line earned at 20 s
  };
  for (const auto& s : steps) {
    const auto d = l.on_repair(t0 + s.at);
    const double at_s = std::chrono::duration<double>(s.at).count();
    EXPECT_EQ(d.log, s.log) << "repair at " << at_s << " s";
    if (s.log) {
      EXPECT_EQ(d.unlogged, s.unlogged) << "repair at " << at_s << " s";
    }
    ASSERT_EQ(d.summary_at.has_value(), s.summary_at.has_value()) << "repair at " << at_s << " s";
    if (s.summary_at) {
      EXPECT_EQ(*d.summary_at, t0 + *s.summary_at) << "repair at " << at_s << " s";
    }
  }
}

TEST(RepairLogLimit, TheSummaryCountsWhatNoLaterLineCarried) {
  RepairLogLimit l(1, 10s);
  ASSERT_TRUE(l.on_repair(t0).log);
  const auto d = l.on_repair(t0 + 1s);
  ASSERT_FALSE(d.log);
  ASSERT_TRUE(d.summary_at);
  for (int i = 2; i < 200; ++i) EXPECT_FALSE(l.on_repair(t0 + 1s + i * 1ms).log);  // a fight: 199 unlogged
  const auto s = l.take_summary(*d.summary_at);
  ASSERT_TRUE(s);
  EXPECT_EQ(s->unlogged, 199u);
  EXPECT_EQ(s->since_last_line, 10s);
  EXPECT_FALSE(l.take_summary(*d.summary_at + 1s)) << "nothing owed twice";
  // The summary spent the line: the next repair waits for the following interval.
  const auto next = l.on_repair(t0 + 11s);
  EXPECT_FALSE(next.log);
  ASSERT_TRUE(next.summary_at);
  EXPECT_EQ(*next.summary_at, t0 + 20s);
}

TEST(RepairLogLimit, ASummaryIsNotWrittenWhenALaterLineCarriedTheCount) {
  RepairLogLimit l(1, 10s);
  l.on_repair(t0);
  const auto d = l.on_repair(t0 + 1s);
  ASSERT_TRUE(d.summary_at);
  const auto line = l.on_repair(t0 + 10s);  // the repair at 10 s comes before the timer
  EXPECT_TRUE(line.log);
  EXPECT_EQ(line.unlogged, 1u);
  EXPECT_EQ(line.since_last_line, 10s);
  EXPECT_FALSE(l.take_summary(t0 + 10s));
}

TEST(RepairLogLimit, AQuietContainerGetsItsWholeBurstBack) {
  RepairLogLimit l(2, 10s);
  EXPECT_TRUE(l.on_repair(t0).log);
  EXPECT_TRUE(l.on_repair(t0).log);
  EXPECT_FALSE(l.on_repair(t0).log);
  EXPECT_TRUE(l.on_repair(t0 + 1h).log);
  EXPECT_TRUE(l.on_repair(t0 + 1h).log) << "refilled to the burst";
  EXPECT_FALSE(l.on_repair(t0 + 1h).log) << "not beyond it";
}

TEST(RepairLogLimit, DefaultsBoundAFightLoopsLines) {
  const Config defaults;
  RepairLogLimit l(defaults.repair.log_burst, defaults.repair.log_interval);
  // 200 repairs a second for a minute, summaries written when due.
  std::uint64_t lines = 0, counted = 0;
  constexpr Clock::time_point kNone = Clock::time_point::max();  // no summary due
  Clock::time_point summary_at = kNone;
  for (int i = 0; i < 200 * 60; ++i) {
    const auto now = t0 + i * 5ms;
    if (now >= summary_at) {
      if (auto s = l.take_summary(summary_at)) ++lines, counted += s->unlogged;
      summary_at = kNone;
    }
    const auto d = l.on_repair(now);
    if (d.log) ++lines, counted += 1 + d.unlogged;
    if (d.summary_at) summary_at = *d.summary_at;
  }
  if (summary_at != kNone) {
    if (auto s = l.take_summary(summary_at)) ++lines, counted += s->unlogged;
  }
  EXPECT_LE(lines, defaults.repair.log_burst + 7u) << "the burst, then one line per 10 s";
  EXPECT_EQ(counted, 200u * 60u) << "every repair is in a line or a count";
}

}  // namespace
}  // namespace gdw
