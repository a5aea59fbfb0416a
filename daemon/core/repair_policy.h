// When the daemon may repair a container again, and when a repair gets its own log line.
// Pure: time is passed in.
//
// RepairBudget is the fight-loop guard: a token bucket per container. A writer that revokes
// again and again is repaired every time and at once while the bucket holds tokens; only a
// loop that empties it (an endless fight with another writer) is slowed to the sustained
// rate, which bounds what such a fight costs the node. The defaults (config.h, repair.burst
// and repair.max_per_minute) are sized so that no real re-applier ever empties it.
//
// RepairLogLimit keeps the journal readable in such a fight without slowing any repair: a
// repair is cheap, a log line per repair at hundreds a second is not.
#pragma once

#include <cstdint>
#include <optional>

#include "core/clock.h"

namespace gdw {

class RepairBudget {
 public:
  RepairBudget(std::uint32_t burst, std::uint32_t per_minute);

  // Takes a token when one is available and returns Clock::duration::zero(); otherwise
  // returns how long until the next token (nothing taken).
  Clock::duration acquire(Clock::time_point now);
  // True while the container is being repaired faster than its sustained rate.
  bool exhausted(Clock::time_point now) const;
  // When acquire() would next give a token (`now` when it would now).
  Clock::time_point next_token_at(Clock::time_point now) const;

 private:
  void refill(Clock::time_point now);

  double capacity_;
  double tokens_;
  double tokens_per_ns_;
  Clock::time_point last_{};
};

// Per container: the first `burst` repairs are logged as they happen, then one line per
// `interval`; the repairs in between are counted, and the next line (or a summary when the
// interval ends, if no repair comes to carry the count) says how many there were.
class RepairLogLimit {
 public:
  RepairLogLimit(std::uint32_t burst, Clock::duration interval);

  struct Decision {
    bool log = false;  // give this repair its line now
    // When logging: repairs that got no line since the previous line, and how long ago that
    // line was (the span they fall in).
    std::uint64_t unlogged = 0;
    Clock::duration since_last_line{};
    // When not logging and no summary is owed yet: when to write one (the caller arms a
    // timer and calls take_summary then).
    std::optional<Clock::time_point> summary_at;
  };
  Decision on_repair(Clock::time_point now);

  struct Summary {
    std::uint64_t unlogged = 0;
    Clock::duration since_last_line{};
  };
  // The summary timer fired: what to report, or nothing when a later line already carried it.
  std::optional<Summary> take_summary(Clock::time_point now);

 private:
  void refill(Clock::time_point now);
  Clock::time_point next_line_at() const;

  std::uint32_t capacity_;
  std::uint32_t lines_;  // lines that may be written now
  Clock::duration interval_;
  Clock::time_point refilled_at_{};  // when the last whole line was credited
  Clock::time_point last_line_at_{};
  std::uint64_t unlogged_ = 0;
  bool summary_owed_ = false;
};

}  // namespace gdw
