// The daemon's one clock for deadlines, back-off and rate limits. Monotonic, so a wall
// clock step (NTP, an operator) never fires or postpones a timer; the probe's ktime
// timestamps (CLOCK_MONOTONIC) compare with it directly.
#pragma once

#include <chrono>
#include <cstdint>

namespace gdw {

using Clock = std::chrono::steady_clock;

// A probe timestamp (bpf_ktime_get_ns) on Clock.
inline Clock::time_point probe_time(std::uint64_t ktime_ns) {
  return Clock::time_point(std::chrono::duration_cast<Clock::duration>(std::chrono::nanoseconds(ktime_ns)));
}

}  // namespace gdw
