#include "metrics/loop_health.h"

#include <cstdio>

namespace gdw {

LoopHealth judge_loop_health(Clock::time_point last_turn, Clock::time_point now,
                             Clock::duration stale_after) {
  LoopHealth h;
  // A beat "from the future" (clock read on another CPU a moment later) counts as now.
  h.since_turn = now > last_turn ? now - last_turn : Clock::duration::zero();
  h.healthy = last_turn.time_since_epoch().count() != 0 && h.since_turn <= stale_after;
  return h;
}

HttpResponse health_response(const LoopHealth& health, Clock::duration stale_after) {
  using Seconds = std::chrono::duration<double>;
  char text[160];
  std::snprintf(text, sizeof text, "%s: event loop last turned %.3fs ago (limit %.3fs)\n",
                health.healthy ? "ok" : "stalled", Seconds(health.since_turn).count(), Seconds(stale_after).count());
  return HttpResponse{health.healthy ? 200 : 503, "text/plain; charset=utf-8", text};
}

}  // namespace gdw
