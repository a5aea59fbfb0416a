#include "watch/event_loop.h"

#include <signal.h>
#include <systemd/sd-event.h>

#include <cerrno>
#include <cstring>
#include <exception>
#include <optional>

namespace gdw {

struct EventCallbacks {
  struct Io {
    EventLoop* loop;
    std::string name;
    std::function<void(std::uint32_t)> cb;
  };
  struct Plain {
    EventLoop* loop;
    std::string name;
    std::function<void()> cb;
  };

  template <class F>
  static void guarded(EventLoop* loop, const std::string& name, F&& f) {
    try {
      f();
    } catch (const std::exception& e) {
      if (loop->on_error_) loop->on_error_(name, e.what());
    } catch (...) {
      if (loop->on_error_) loop->on_error_(name, "unknown exception");
    }
  }
  static int on_io(sd_event_source*, int, uint32_t revents, void* data) {
    auto* d = static_cast<Io*>(data);
    guarded(d->loop, d->name, [&] { d->cb(revents); });
    return 0;
  }
  static int on_time(sd_event_source*, uint64_t, void* data) {
    auto* d = static_cast<Plain*>(data);
    guarded(d->loop, d->name, [&] { d->cb(); });
    return 0;
  }
  static int on_signal(sd_event_source*, const struct signalfd_siginfo*, void* data) {
    auto* d = static_cast<Plain*>(data);
    guarded(d->loop, d->name, [&] { d->cb(); });
    return 0;
  }
  template <class T>
  static void destroy(void* data) {
    delete static_cast<T*>(data);
  }
};

namespace {
Error sd_error(const std::string& what, int r) { return Error{what + ": " + std::strerror(-r)}; }
}  // namespace

EventSource& EventSource::operator=(EventSource&& o) noexcept {
  if (this != &o) {
    if (source_) sd_event_source_disable_unref(source_);
    source_ = o.source_;
    o.source_ = nullptr;
  }
  return *this;
}

EventSource::~EventSource() {
  if (source_) sd_event_source_disable_unref(source_);
}

Status EventSource::arm(std::chrono::microseconds delay) {
  if (!source_) return Error{"timer not created"};
  int r = sd_event_source_set_time_relative(source_, static_cast<uint64_t>(std::max<int64_t>(delay.count(), 0)));
  if (r < 0) return sd_error("arming timer", r);
  r = sd_event_source_set_enabled(source_, SD_EVENT_ONESHOT);
  if (r < 0) return sd_error("enabling timer", r);
  return {};
}

void EventSource::disarm() {
  if (source_) sd_event_source_set_enabled(source_, SD_EVENT_OFF);
}

bool EventSource::armed() const {
  int enabled = SD_EVENT_OFF;
  return source_ && sd_event_source_get_enabled(source_, &enabled) >= 0 && enabled != SD_EVENT_OFF;
}

Result<std::unique_ptr<EventLoop>> EventLoop::create() {
  std::unique_ptr<EventLoop> loop(new EventLoop());
  int r = sd_event_new(&loop->event_);
  if (r < 0) return sd_error("sd_event_new", r);
  return loop;
}

EventLoop::~EventLoop() {
  if (event_) sd_event_unref(event_);
}

Result<EventSource> EventLoop::add_io(int fd, std::uint32_t epoll_events, std::function<void(std::uint32_t)> cb,
                                      const std::string& name, int priority) {
  auto* data = new EventCallbacks::Io{this, name, std::move(cb)};
  sd_event_source* s = nullptr;
  int r = sd_event_add_io(event_, &s, fd, epoll_events, EventCallbacks::on_io, data);
  if (r < 0) {
    delete data;
    return sd_error("watching " + name, r);
  }
  sd_event_source_set_destroy_callback(s, EventCallbacks::destroy<EventCallbacks::Io>);
  sd_event_source_set_priority(s, priority);
  sd_event_source_set_description(s, name.c_str());
  return EventSource(s);
}

Result<EventSource> EventLoop::add_timer(std::function<void()> cb, const std::string& name,
                                         std::optional<std::chrono::microseconds> delay, int priority) {
  auto* data = new EventCallbacks::Plain{this, name, std::move(cb)};
  sd_event_source* s = nullptr;
  // Accuracy 1 µs: repair timers must not be coalesced into systemd's default 250 ms window.
  int r = sd_event_add_time_relative(event_, &s, CLOCK_MONOTONIC, delay ? delay->count() : 0, 1,
                                     EventCallbacks::on_time, data);
  if (r < 0) {
    delete data;
    return sd_error("timer " + name, r);
  }
  sd_event_source_set_destroy_callback(s, EventCallbacks::destroy<EventCallbacks::Plain>);
  sd_event_source_set_priority(s, priority);
  sd_event_source_set_description(s, name.c_str());
  if (!delay) sd_event_source_set_enabled(s, SD_EVENT_OFF);
  return EventSource(s);
}

Result<EventSource> EventLoop::add_signal(int signo, std::function<void()> cb, const std::string& name) {
  sigset_t mask;
  sigemptyset(&mask);
  sigaddset(&mask, signo);
  if (sigprocmask(SIG_BLOCK, &mask, nullptr) != 0) return Error{"blocking signal " + name + ": " + std::strerror(errno)};
  auto* data = new EventCallbacks::Plain{this, name, std::move(cb)};
  sd_event_source* s = nullptr;
  int r = sd_event_add_signal(event_, &s, signo, EventCallbacks::on_signal, data);
  if (r < 0) {
    delete data;
    return sd_error("signal " + name, r);
  }
  sd_event_source_set_destroy_callback(s, EventCallbacks::destroy<EventCallbacks::Plain>);
  return EventSource(s);
}

Status EventLoop::enable_watchdog() {
  int r = sd_event_set_watchdog(event_, 1);
  if (r < 0) return sd_error("enabling the watchdog", r);
  return {};
}

bool EventLoop::watchdog_enabled() const { return sd_event_get_watchdog(event_) > 0; }

int EventLoop::run() {
  int r = sd_event_loop(event_);
  return r < 0 ? 1 : r;
}

std::uint64_t EventLoop::iteration() const {
  std::uint64_t n = 0;
  (void)sd_event_get_iteration(event_, &n);
  return n;
}

void EventLoop::exit(int code) { sd_event_exit(event_, code); }

}  // namespace gdw
