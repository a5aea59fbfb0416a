// Arming the loop's one-shot timers: a failure (sd-event out of memory) is counted under
// the timer's name and logged, and the caller carries on (what the timer was for happens
// at the next resync instead).
#pragma once

#include <string>

#include "core/clock.h"
#include "metrics/daemon_metrics.h"
#include "watch/event_loop.h"

namespace gdw {

void arm_timer(EventSource& timer, Clock::duration delay, const std::string& name, DaemonMetrics metrics);

}  // namespace gdw
