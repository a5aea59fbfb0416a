// /healthz: 200 while the event loop has turned within the watchdog interval, 503 once it
// has not. The loop beats (LoopHeartbeat::beat, from a top-priority timer); the HTTP
// threads judge. A blocked loop (a syscall that never returns) is what this catches: the
// process and its HTTP threads are alive, but nothing is repaired.
#pragma once

#include <atomic>
#include <chrono>

#include "core/clock.h"
#include "metrics/http_server.h"

namespace gdw {

struct LoopHealth {
  bool healthy = false;
  Clock::duration since_turn{};  // how long ago the loop last turned
};

// Pure: healthy while `now - last_turn <= stale_after`.
LoopHealth judge_loop_health(Clock::time_point last_turn, Clock::time_point now,
                             Clock::duration stale_after);
HttpResponse health_response(const LoopHealth& health, Clock::duration stale_after);

// Written by the loop, read by the HTTP threads.
class LoopHeartbeat {
 public:
  void beat(Clock::time_point now) { last_.store(now.time_since_epoch().count(), std::memory_order_relaxed); }
  void set_stale_after(Clock::duration d) { stale_after_.store(d.count(), std::memory_order_relaxed); }
  Clock::duration stale_after() const { return Clock::duration(stale_after_.load(std::memory_order_relaxed)); }
  Clock::time_point last() const {
    return Clock::time_point(Clock::duration(last_.load(std::memory_order_relaxed)));
  }
  // What /healthz answers at `now`.
  HttpResponse answer(Clock::time_point now) const {
    return health_response(judge_loop_health(last(), now, stale_after()), stale_after());
  }

 private:
  std::atomic<Clock::rep> last_{0};
  std::atomic<Clock::rep> stale_after_{0};
};

}  // namespace gdw
