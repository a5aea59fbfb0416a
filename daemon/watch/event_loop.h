// A thin C++ face over sd-event: io, timers, signals, the systemd watchdog. Callbacks are
// std::functions; nothing thrown in one crosses back into C (it is caught, counted and
// logged by the trampoline) and every callback returns 0, so sd-event never silently
// disables a source.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>

#include "core/result.h"

struct sd_event;
struct sd_event_source;

namespace gdw {

class EventSource {
 public:
  EventSource() = default;
  explicit EventSource(sd_event_source* s) : source_(s) {}
  EventSource(EventSource&& o) noexcept : source_(o.source_) { o.source_ = nullptr; }
  EventSource& operator=(EventSource&& o) noexcept;
  EventSource(const EventSource&) = delete;
  EventSource& operator=(const EventSource&) = delete;
  ~EventSource();

  explicit operator bool() const { return source_ != nullptr; }
  // Timers: fire once, `delay` from now (re-arms a fired or pending timer).
  Status arm(std::chrono::microseconds delay);
  void disarm();
  bool armed() const;

 private:
  sd_event_source* source_ = nullptr;
};

class EventLoop {
 public:
  static Result<std::unique_ptr<EventLoop>> create();
  ~EventLoop();
  EventLoop(const EventLoop&) = delete;
  EventLoop& operator=(const EventLoop&) = delete;

  using ErrorHandler = std::function<void(const std::string& source, const std::string& what)>;
  void on_callback_error(ErrorHandler h) { on_error_ = std::move(h); }

  Result<EventSource> add_io(int fd, std::uint32_t epoll_events, std::function<void(std::uint32_t)> cb,
                             const std::string& name, int priority = 0);
  // A one-shot timer on CLOCK_MONOTONIC, created disarmed unless `delay` is given.
  Result<EventSource> add_timer(std::function<void()> cb, const std::string& name,
                                std::optional<std::chrono::microseconds> delay = std::nullopt, int priority = 0);
  // Blocks the signal for the process and delivers it here.
  Result<EventSource> add_signal(int signo, std::function<void()> cb, const std::string& name);
  // Sends WATCHDOG=1 at half of WATCHDOG_USEC when the service manager asks for it.
  Status enable_watchdog();
  bool watchdog_enabled() const;

  int run();
  // How many turns the loop has made (sd-event's iteration): the same within one dispatch.
  std::uint64_t iteration() const;
  void exit(int code);
  // For libraries that attach to sd-event themselves (sd-bus calls).
  sd_event* native() const { return event_; }

 private:
  EventLoop() = default;
  friend struct EventCallbacks;
  sd_event* event_ = nullptr;
  ErrorHandler on_error_;
};

}  // namespace gdw
