// When the daemon may repair a container again: a token bucket per container (a writer
// that revokes again and again is repaired every time, but not in a hot loop) and a back-off
// after the kernel refused a grant. Pure: time is passed in.
#pragma once

#include <chrono>
#include <cstdint>

namespace gdw {

using Clock = std::chrono::steady_clock;

class RepairBudget {
 public:
  RepairBudget(std::uint32_t burst, std::uint32_t per_minute);

  // Takes a token when one is available and returns Clock::duration::zero(); otherwise
  // returns how long until the next token (nothing taken).
  Clock::duration acquire(Clock::time_point now);
  // True while the container is being repaired faster than its sustained rate.
  bool exhausted(Clock::time_point now) const;

 private:
  void refill(Clock::time_point now);

  double capacity_;
  double tokens_;
  double tokens_per_ns_;
  Clock::time_point last_{};
};

}  // namespace gdw
