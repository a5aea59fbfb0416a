// /healthz: 200 while the event loop has turned within the watchdog interval, 503 once it
// has not. The loop beats (LoopHeartbeat::beat, from a top-priority timer); the HTTP
// threads judge. A blocked loop (a syscall that never returns) is what this catches: the
// process and its HTTP threads are alive, but nothing is repaired.
#pragma once

#include <atomic>
#include <chrono>

#include "metrics/http_server.h"

namespace gdw {

using SteadyClock = std::chrono::steady_clock;

struct LoopHealth {
  bool healthy = false;
  SteadyClock::duration since_turn{};  // how long ago the loop last turned
};

// Pure: healthy while `now - last_turn <= stale_after`.
LoopHealth judge_loop_health(SteadyClock::time_point last_turn, SteadyClock::time_point now,
                             SteadyClock::duration stale_after);
HttpResponse health_response(const LoopHealth& health, SteadyClock::duration stale_after);

// Written by the loop, read by the HTTP threads.
class LoopHeartbeat {
 public:
  void beat(SteadyClock::time_point now) { last_.store(now.time_since_epoch().count(), std::memory_order_relaxed); }
  void set_stale_after(SteadyClock::duration d) { stale_after_.store(d.count(), std::memory_order_relaxed); }
  SteadyClock::duration stale_after() const { return SteadyClock::duration(stale_after_.load(std::memory_order_relaxed)); }
  SteadyClock::time_point last() const {
    return SteadyClock::time_point(SteadyClock::duration(last_.load(std::memory_order_relaxed)));
  }
  // What /healthz answers at `now`.
  HttpResponse answer(SteadyClock::time_point now) const {
    return health_response(judge_loop_health(last(), now, stale_after()), stale_after());
  }

 private:
  std::atomic<SteadyClock::rep> last_{0};
  std::atomic<SteadyClock::rep> stale_after_{0};
};

}  // namespace gdw
