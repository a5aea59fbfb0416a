// The daemon's one clock for deadlines, back-off and rate limits. Monotonic, so a wall
// clock step (NTP, an operator) never fires or postpones a timer; the probe's ktime
// timestamps (CLOCK_MONOTONIC) compare with it directly.
#pragma once

#include <chrono>

namespace gdw {

using Clock = std::chrono::steady_clock;

}  // namespace gdw
