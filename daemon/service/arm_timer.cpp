#include "service/arm_timer.h"

#include "log/log.h"

namespace gdw {

void arm_timer(EventSource& timer, Clock::duration delay, const std::string& name, DaemonMetrics metrics) {
  if (auto s = timer.arm(std::chrono::duration_cast<std::chrono::microseconds>(delay)); !s) {
    metrics.event_loop_error(name);
    log::error("cannot arm the " + name + " timer: " + s.error().message);
  }
}

}  // namespace gdw
