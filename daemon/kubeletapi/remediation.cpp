#include "kubeletapi/remediation.h"

#include <fcntl.h>
#include <systemd/sd-bus.h>
#include <systemd/sd-event.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <ctime>

namespace gdw {
namespace {

std::string utc_stamp(std::chrono::system_clock::time_point now) {
  const std::time_t t = std::chrono::system_clock::to_time_t(now);
  std::tm tm{};
  ::gmtime_r(&t, &tm);
  char text[32];
  std::strftime(text, sizeof text, "%Y%m%dT%H%M%SZ", &tm);
  return text;
}

}  // namespace

Result<std::string> move_checkpoint_aside(const std::string& checkpoint_path,
                                          std::chrono::system_clock::time_point now) {
  const std::string target = checkpoint_path + ".stale-" + utc_stamp(now);
  const std::string what = "moving " + checkpoint_path + " aside to " + target;
  if (::renameat2(AT_FDCWD, checkpoint_path.c_str(), AT_FDCWD, target.c_str(), RENAME_NOREPLACE) == 0) {
    return target;
  }
  const int rename_error = errno;
  if (rename_error != EINVAL) return Error{what + ": " + errno_text(rename_error)};
  // A filesystem without RENAME_NOREPLACE: link() refuses to overwrite just the same, and
  // the data keeps a name at every moment.
  if (::link(checkpoint_path.c_str(), target.c_str()) != 0) {
    const int err = errno;
    return Error{what + ": " + errno_text(err)};
  }
  if (::unlink(checkpoint_path.c_str()) != 0) {
    const int err = errno;
    ::unlink(target.c_str());
    return Error{what + ": removing the old name: " + errno_text(err)};
  }
  return target;
}

struct UnitRestartCallbacks {
  static int on_reply(sd_bus_message* reply, void* self, sd_bus_error* error);
  static int on_timeout(sd_event_source* source, std::uint64_t usec, void* self);
  static int on_deliver(sd_event_source* source, void* self);
};

Result<std::unique_ptr<UnitRestart>> UnitRestart::start(sd_event* event, UnitRestartOptions options, Done done) {
  std::unique_ptr<UnitRestart> restart(new UnitRestart(event, std::move(options), std::move(done)));
  // The outcome always reaches `done` through this deferred source, from the loop, so that
  // `done` may destroy the UnitRestart and never runs inside start() or sd-bus's dispatch.
  int rc = sd_event_add_defer(event, &restart->deliver_, &UnitRestartCallbacks::on_deliver, restart.get());
  if (rc >= 0) rc = sd_event_source_set_enabled(restart->deliver_, SD_EVENT_OFF);
  if (rc >= 0) {
    rc = sd_event_add_time_relative(event, &restart->timer_, CLOCK_MONOTONIC,
                                    std::chrono::duration_cast<std::chrono::microseconds>(restart->options_.timeout).count(),
                                    0, &UnitRestartCallbacks::on_timeout, restart.get());
  }
  if (rc < 0) return Error{"restarting " + restart->options_.unit + ": adding event sources: " + errno_text(-rc)};
  restart->call();
  return restart;
}

UnitRestart::UnitRestart(sd_event* event, UnitRestartOptions options, Done done)
    : event_(event), options_(std::move(options)), done_(std::move(done)) {}

UnitRestart::~UnitRestart() {
  sd_bus_slot_unref(pending_);
  sd_event_source_disable_unref(timer_);
  sd_event_source_disable_unref(deliver_);
  if (bus_ != nullptr) {
    sd_bus_detach_event(bus_);
    sd_bus_close_unref(bus_);
  }
}

std::string UnitRestart::where() const {
  return "RestartUnit(" + options_.unit + ") on " +
         (options_.bus_address.empty() ? std::string("the system bus") : options_.bus_address);
}

void UnitRestart::call() {
  // Connecting a unix socket does not wait for the peer; the authentication and the Hello
  // exchange happen later, in the loop, and the call waits in sd-bus's queue meanwhile.
  int rc = 0;
  if (options_.bus_address.empty()) {
    rc = sd_bus_open_system(&bus_);
  } else {
    rc = sd_bus_new(&bus_);
    if (rc >= 0) rc = sd_bus_set_address(bus_, options_.bus_address.c_str());
    if (rc >= 0) rc = sd_bus_set_bus_client(bus_, 1);
    if (rc >= 0) rc = sd_bus_start(bus_);
  }
  if (rc < 0) return finish(Error{where() + ": connecting: " + errno_text(-rc)});
  rc = sd_bus_attach_event(bus_, event_, SD_EVENT_PRIORITY_NORMAL);
  if (rc < 0) return finish(Error{where() + ": attaching the bus to the event loop: " + errno_text(-rc)});

  sd_bus_message* message = nullptr;
  rc = sd_bus_message_new_method_call(bus_, &message, "org.freedesktop.systemd1", "/org/freedesktop/systemd1",
                                      "org.freedesktop.systemd1.Manager", "RestartUnit");
  if (rc >= 0) rc = sd_bus_message_append(message, "ss", options_.unit.c_str(), "replace");
  // sd-bus's own timeout (0: its 25 s default) only backs up our timer, which bounds the
  // whole exchange including the authentication a hung bus never completes.
  if (rc >= 0) rc = sd_bus_call_async(bus_, &pending_, message, &UnitRestartCallbacks::on_reply, this, 0);
  sd_bus_message_unref(message);
  if (rc < 0) finish(Error{where() + ": sending: " + errno_text(-rc)});
}

void UnitRestart::finish(Result<std::string> outcome) {
  if (outcome_) return;
  outcome_ = std::move(outcome);
  pending_ = sd_bus_slot_unref(pending_);  // abandons the reply still awaited, if any
  sd_event_source_set_enabled(timer_, SD_EVENT_OFF);
  sd_event_source_set_enabled(deliver_, SD_EVENT_ONESHOT);
}

int UnitRestartCallbacks::on_reply(sd_bus_message* reply, void* self_ptr, sd_bus_error*) {
  auto* self = static_cast<UnitRestart*>(self_ptr);
  if (sd_bus_message_is_method_error(reply, nullptr)) {
    const sd_bus_error* e = sd_bus_message_get_error(reply);
    self->finish(Error{self->where() + ": " + (e->name ? e->name : "unnamed D-Bus error") + ": " +
                       (e->message ? e->message : "")});
    return 0;
  }
  const char* job = nullptr;
  const int rc = sd_bus_message_read(reply, "o", &job);
  if (rc < 0) {
    self->finish(Error{self->where() + ": unexpected reply: " + errno_text(-rc)});
  } else {
    self->finish(std::string(job));
  }
  return 0;
}

int UnitRestartCallbacks::on_timeout(sd_event_source*, std::uint64_t, void* self_ptr) {
  auto* self = static_cast<UnitRestart*>(self_ptr);
  self->finish(Error{self->where() + ": no answer within " + format_duration(self->options_.timeout)});
  return 0;
}

int UnitRestartCallbacks::on_deliver(sd_event_source*, void* self_ptr) {
  auto* self = static_cast<UnitRestart*>(self_ptr);
  // `done` may destroy *self: take everything out first, touch nothing after.
  UnitRestart::Done done = std::move(self->done_);
  Result<std::string> outcome = std::move(*self->outcome_);
  if (done) done(std::move(outcome));
  return 0;
}

Result<RemediationStarted> start_remediation(sd_event* event, const RemediationOptions& options,
                                             std::chrono::system_clock::time_point now, UnitRestart::Done done) {
  auto moved = move_checkpoint_aside(options.checkpoint_path, now);
  if (!moved) return moved.error();
  auto restart = UnitRestart::start(event, options.restart, std::move(done));
  if (!restart) return with_context("checkpoint moved to " + *moved, restart.error());
  return RemediationStarted{std::move(*moved), std::move(*restart)};
}

}  // namespace gdw
