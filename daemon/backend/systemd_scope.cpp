#include "backend/systemd_scope.h"

#include <systemd/sd-bus.h>
#include <systemd/sd-event.h>
#include <time.h>

#include <cerrno>
#include <cstdint>
#include <cstring>
#include <exception>
#include <list>
#include <optional>

#include "core/device_rule.h"
#include "log/log.h"

namespace gdw {
namespace {

constexpr const char* kSystemdService = "org.freedesktop.systemd1";
constexpr const char* kSystemdPath = "/org/freedesktop/systemd1";
constexpr const char* kManagerInterface = "org.freedesktop.systemd1.Manager";
// sd-event's default timer slack (accuracy 0) is 250 ms: too coarse for deadlines of a
// few hundred ms.
constexpr std::uint64_t kTimerAccuracyUsec = 1000;

std::uint64_t to_usec(std::chrono::milliseconds d) {
  return static_cast<std::uint64_t>(std::chrono::duration_cast<std::chrono::microseconds>(d).count());
}

std::string describe_bus(const std::string& address) {
  return address.empty() ? std::string("the system bus") : address;
}

std::string bus_error_text(const sd_bus_error* e) {
  if (e == nullptr) return "unnamed D-Bus error";
  return std::string(e->name != nullptr ? e->name : "unnamed D-Bus error") + ": " +
         (e->message != nullptr ? e->message : "");
}

// Exceptions thrown by callers' callbacks must not unwind into sd-bus or sd-event (C).
template <class F>
void guarded(const char* what, F&& f) {
  try {
    f();
  } catch (const std::exception& e) {
    log::error(std::string(what) + " threw: " + e.what());
  } catch (...) {
    log::error(std::string(what) + " threw an unknown exception");
  }
}

class SdBusSystemdClient final : public SystemdClient {
 public:
  SdBusSystemdClient(std::string address, sd_event* event, std::chrono::milliseconds timeout)
      : address_(std::move(address)), event_(event), timeout_(timeout) {}
  ~SdBusSystemdClient() override;

  Status open_bus();
  Status add_device_allow(const std::string& unit, const std::vector<WantedDevice>& devices,
                          std::function<void(Status)> done) override;
  Status on_reloading(std::function<void(bool active)> handler) override;

 private:
  struct PendingCall {
    SdBusSystemdClient* client = nullptr;
    sd_bus* bus = nullptr;  // the connection it was sent on (kept alive by reply_slot)
    std::string what;       // "SetUnitProperties(<unit>) on <address>"
    sd_bus_slot* reply_slot = nullptr;
    sd_event_source* deadline = nullptr;
    sd_event_source* deliver = nullptr;
    std::function<void(Status)> done;
    std::optional<Status> outcome;

    ~PendingCall() {
      sd_bus_slot_unref(reply_slot);
      sd_event_source_disable_unref(deadline);
      sd_event_source_disable_unref(deliver);
    }
  };

  static int on_reply(sd_bus_message* reply, void* userdata, sd_bus_error* ret_error);
  static int on_deadline(sd_event_source* source, std::uint64_t usec, void* userdata);
  static int on_deliver(sd_event_source* source, void* userdata);
  static int on_message(sd_bus_message* message, void* userdata, sd_bus_error* ret_error);
  static int on_reloading_signal(sd_bus_message* message, void* userdata, sd_bus_error* ret_error);
  static int on_match_installed(sd_bus_message* reply, void* userdata, sd_bus_error* ret_error);
  static int on_reconnect(sd_event_source* source, std::uint64_t usec, void* userdata);

  std::string where() const { return describe_bus(address_); }
  Status ensure_bus();
  void drop_bus();
  Status install_reloading_match(bool announce);
  void finish(PendingCall* call, Status outcome);
  void schedule_reconnect();

  std::string address_;
  sd_event* event_;
  std::chrono::milliseconds timeout_;
  sd_bus* bus_ = nullptr;
  bool bus_broken_ = false;  // disconnected, or a deadline passed before Hello completed
  sd_bus_slot* filter_slot_ = nullptr;
  sd_bus_slot* reloading_slot_ = nullptr;
  bool announce_after_install_ = false;  // call the handler with false once the match is back
  std::function<void(bool)> reloading_handler_;
  sd_event_source* reconnect_timer_ = nullptr;
  bool reconnect_failing_ = false;  // log the first failed reconnect and the recovery only
  std::list<std::unique_ptr<PendingCall>> calls_;
};

SdBusSystemdClient::~SdBusSystemdClient() {
  calls_.clear();  // their reply slots go before the bus they hold
  sd_event_source_disable_unref(reconnect_timer_);
  drop_bus();
}

Status SdBusSystemdClient::open_bus() {
  // A unix connect() returns at once, whether or not the peer ever answers; the
  // authentication and Hello that could hang run later, on the loop, inside the calls'
  // deadlines.
  int rc = 0;
  if (address_.empty()) {
    rc = sd_bus_open_system(&bus_);
  } else {
    rc = sd_bus_new(&bus_);
    if (rc >= 0) rc = sd_bus_set_address(bus_, address_.c_str());
    if (rc >= 0) rc = sd_bus_set_bus_client(bus_, 1);
    if (rc >= 0) rc = sd_bus_start(bus_);
  }
  if (rc < 0) {
    bus_ = sd_bus_close_unref(bus_);
    return Error{"connecting to " + where() + ": " + errno_text(rc)};
  }
  rc = sd_bus_set_method_call_timeout(bus_, to_usec(timeout_));
  // A purely local filter: sees the Disconnected message sd-bus synthesises, without asking
  // the bus daemon for anything.
  if (rc >= 0) rc = sd_bus_add_filter(bus_, &filter_slot_, &SdBusSystemdClient::on_message, this);
  if (rc >= 0) rc = sd_bus_attach_event(bus_, event_, SD_EVENT_PRIORITY_NORMAL);
  if (rc < 0) {
    drop_bus();
    return Error{"attaching " + where() + " to the event loop: " + errno_text(rc)};
  }
  bus_broken_ = false;
  return {};
}

void SdBusSystemdClient::drop_bus() {
  reloading_slot_ = sd_bus_slot_unref(reloading_slot_);
  filter_slot_ = sd_bus_slot_unref(filter_slot_);
  if (bus_ != nullptr) {
    sd_bus_detach_event(bus_);
    bus_ = sd_bus_close_unref(bus_);
  }
}

Status SdBusSystemdClient::ensure_bus() {
  if (bus_ != nullptr && !bus_broken_ && sd_bus_is_open(bus_) > 0) return {};
  drop_bus();
  if (auto opened = open_bus(); !opened) return opened;
  if (reloading_handler_) return install_reloading_match(true);
  return {};
}

Status SdBusSystemdClient::add_device_allow(const std::string& unit, const std::vector<WantedDevice>& devices,
                                            std::function<void(Status)> done) {
  const std::string what = "SetUnitProperties(" + unit + ", DeviceAllow) on " + where();
  const auto entries = device_allow_entries(devices);
  if (entries.empty()) return Error{what + ": no devices to allow (an empty DeviceAllow= resets the unit's list)"};
  if (unit.empty()) return Error{what + ": no unit name"};
  if (auto ready = ensure_bus(); !ready) return with_context(what, ready.error());

  sd_bus_message* message = nullptr;
  int rc = sd_bus_message_new_method_call(bus_, &message, kSystemdService, kSystemdPath, kManagerInterface,
                                          "SetUnitProperties");
  // (sba(sv)): the unit, runtime=true (a drop-in under /run, gone at reboot like the
  // container), and one property whose variant holds a(ss).
  if (rc >= 0) rc = sd_bus_message_append(message, "sb", unit.c_str(), 1);
  if (rc >= 0) rc = sd_bus_message_open_container(message, 'a', "(sv)");
  if (rc >= 0) rc = sd_bus_message_open_container(message, 'r', "sv");
  if (rc >= 0) rc = sd_bus_message_append(message, "s", "DeviceAllow");
  if (rc >= 0) rc = sd_bus_message_open_container(message, 'v', "a(ss)");
  if (rc >= 0) rc = sd_bus_message_open_container(message, 'a', "(ss)");
  for (const auto& [path, access] : entries) {
    if (rc >= 0) rc = sd_bus_message_append(message, "(ss)", path.c_str(), access.c_str());
  }
  for (int level = 0; level < 4 && rc >= 0; ++level) rc = sd_bus_message_close_container(message);
  if (rc < 0) {
    sd_bus_message_unref(message);
    return Error{what + ": building the message: " + errno_text(rc)};
  }

  auto call = std::make_unique<PendingCall>();
  call->client = this;
  call->bus = bus_;
  call->what = what;
  call->done = std::move(done);
  // The outcome always reaches `done` through this deferred source, from the loop, outside
  // sd-bus's dispatch, so that `done` may destroy the client.
  rc = sd_event_add_defer(event_, &call->deliver, &SdBusSystemdClient::on_deliver, call.get());
  if (rc >= 0) rc = sd_event_source_set_enabled(call->deliver, SD_EVENT_OFF);
  // Our own deadline bounds the whole exchange: sd-bus's per-call timeout only starts
  // counting once authentication and Hello are through.
  if (rc >= 0) {
    rc = sd_event_add_time_relative(event_, &call->deadline, CLOCK_MONOTONIC, to_usec(timeout_), kTimerAccuracyUsec,
                                    &SdBusSystemdClient::on_deadline, call.get());
  }
  if (rc >= 0) {
    rc = sd_bus_call_async(bus_, &call->reply_slot, message, &SdBusSystemdClient::on_reply, call.get(),
                           to_usec(timeout_));
  }
  sd_bus_message_unref(message);
  if (rc < 0) return Error{what + ": sending: " + errno_text(rc)};
  calls_.push_back(std::move(call));
  return {};
}

void SdBusSystemdClient::finish(PendingCall* call, Status outcome) {
  if (call->outcome) return;
  call->outcome = std::move(outcome);
  call->reply_slot = sd_bus_slot_unref(call->reply_slot);  // abandons a reply still awaited
  sd_event_source_set_enabled(call->deadline, SD_EVENT_OFF);
  sd_event_source_set_enabled(call->deliver, SD_EVENT_ONESHOT);
}

int SdBusSystemdClient::on_reply(sd_bus_message* reply, void* userdata, sd_bus_error*) {
  auto* call = static_cast<PendingCall*>(userdata);
  if (sd_bus_message_is_method_error(reply, nullptr)) {
    call->client->finish(call, Error{call->what + ": " + bus_error_text(sd_bus_message_get_error(reply))});
  } else {
    call->client->finish(call, Status{});
  }
  return 0;
}

int SdBusSystemdClient::on_deadline(sd_event_source*, std::uint64_t, void* userdata) {
  auto* call = static_cast<PendingCall*>(userdata);
  SdBusSystemdClient* self = call->client;
  // A connection that has not finished its Hello by now is not worth waiting on: the next
  // call connects afresh.
  if (call->bus == self->bus_ && sd_bus_is_ready(self->bus_) <= 0) {
    self->bus_broken_ = true;
    self->schedule_reconnect();
  }
  self->finish(call, Error{call->what + ": no answer within " + std::to_string(self->timeout_.count()) + " ms"});
  return 0;
}

int SdBusSystemdClient::on_deliver(sd_event_source*, void* userdata) {
  auto* call = static_cast<PendingCall*>(userdata);
  SdBusSystemdClient* self = call->client;
  std::function<void(Status)> done = std::move(call->done);
  Status outcome = std::move(*call->outcome);
  // Frees this very source (sd-event allows it from its own callback); `done` may then
  // destroy the client: nothing is touched after it.
  self->calls_.remove_if([call](const std::unique_ptr<PendingCall>& c) { return c.get() == call; });
  if (done) guarded("a SetUnitProperties completion handler", [&] { done(std::move(outcome)); });
  return 0;
}

Status SdBusSystemdClient::on_reloading(std::function<void(bool active)> handler) {
  reloading_handler_ = std::move(handler);
  if (reloading_slot_ != nullptr) return {};
  if (bus_ != nullptr && !bus_broken_ && sd_bus_is_open(bus_) > 0) return install_reloading_match(false);
  return ensure_bus();  // installs the match once connected
}

Status SdBusSystemdClient::install_reloading_match(bool announce) {
  announce_after_install_ = announce;
  // Asynchronous: the AddMatch round trip must not block the loop (sd_bus_match_signal
  // would wait for the bus daemon).
  const int rc = sd_bus_match_signal_async(bus_, &reloading_slot_, kSystemdService, kSystemdPath, kManagerInterface,
                                           "Reloading", &SdBusSystemdClient::on_reloading_signal,
                                           &SdBusSystemdClient::on_match_installed, this);
  if (rc < 0) return Error{"subscribing to Manager.Reloading on " + where() + ": " + errno_text(rc)};
  return {};
}

int SdBusSystemdClient::on_reloading_signal(sd_bus_message* message, void* userdata, sd_bus_error*) {
  auto* self = static_cast<SdBusSystemdClient*>(userdata);
  int active = 0;
  const int rc = sd_bus_message_read(message, "b", &active);
  if (rc < 0) {
    log::warn("Manager.Reloading on " + self->where() + " without its boolean: " + errno_text(rc));
    return 0;
  }
  if (self->reloading_handler_) guarded("a Manager.Reloading handler", [&] { self->reloading_handler_(active != 0); });
  return 0;
}

int SdBusSystemdClient::on_match_installed(sd_bus_message* reply, void* userdata, sd_bus_error*) {
  auto* self = static_cast<SdBusSystemdClient*>(userdata);
  if (sd_bus_message_is_method_error(reply, nullptr)) {
    // A connection lost before the answer: the reconnect subscribes again.
    if (sd_bus_is_open(sd_bus_message_get_bus(reply)) <= 0) return 0;
    log::warn("subscribing to Manager.Reloading on " + self->where() + ": " +
              bus_error_text(sd_bus_message_get_error(reply)) +
              " (daemon-reloads are noticed by the periodic scan only)");
    return 0;
  }
  if (self->announce_after_install_ && self->reloading_handler_) {
    self->announce_after_install_ = false;
    guarded("a Manager.Reloading handler", [&] { self->reloading_handler_(false); });
  }
  return 0;
}

int SdBusSystemdClient::on_message(sd_bus_message* message, void* userdata, sd_bus_error*) {
  auto* self = static_cast<SdBusSystemdClient*>(userdata);
  if (sd_bus_message_is_signal(message, "org.freedesktop.DBus.Local", "Disconnected") > 0) {
    // Torn down from a timer, not here inside sd-bus's dispatch of this very connection.
    self->bus_broken_ = true;
    self->schedule_reconnect();
  }
  return 0;  // let other handlers (pending replies, the Reloading match) see it too
}

void SdBusSystemdClient::schedule_reconnect() {
  // Only a Reloading subscription needs the bus between calls; calls reconnect themselves.
  if (!reloading_handler_) return;
  if (reconnect_timer_ == nullptr) {
    const int rc = sd_event_add_time_relative(event_, &reconnect_timer_, CLOCK_MONOTONIC, 0, kTimerAccuracyUsec,
                                              &SdBusSystemdClient::on_reconnect, this);
    if (rc < 0) {
      log::warn("cannot schedule reconnecting to " + where() + ": " + errno_text(rc));
      return;
    }
  } else {
    sd_event_source_set_time_relative(reconnect_timer_, 0);
  }
  sd_event_source_set_enabled(reconnect_timer_, SD_EVENT_ONESHOT);
}

int SdBusSystemdClient::on_reconnect(sd_event_source* source, std::uint64_t, void* userdata) {
  auto* self = static_cast<SdBusSystemdClient*>(userdata);
  if (!self->bus_broken_ && self->bus_ != nullptr) return 0;  // a call reconnected meanwhile
  if (auto ready = self->ensure_bus(); !ready) {
    if (!self->reconnect_failing_)
      log::warn(ready.error().message + " (retrying every " + std::to_string(self->timeout_.count()) + " ms)");
    self->reconnect_failing_ = true;
    sd_event_source_set_time_relative(source, to_usec(self->timeout_));
    sd_event_source_set_enabled(source, SD_EVENT_ONESHOT);
    return 0;
  }
  if (self->reconnect_failing_) log::info("connected to " + self->where() + " again");
  self->reconnect_failing_ = false;
  return 0;
}

}  // namespace

std::string scope_unit_of(const std::string& cgroup_dir) {
  std::string_view dir = cgroup_dir;
  while (!dir.empty() && dir.back() == '/') dir.remove_suffix(1);
  const auto slash = dir.rfind('/');
  const std::string_view leaf = slash == std::string_view::npos ? dir : dir.substr(slash + 1);
  constexpr std::string_view kSuffix = ".scope";
  if (leaf.size() <= kSuffix.size() || !leaf.ends_with(kSuffix)) return {};
  return std::string(leaf);
}

std::vector<std::pair<std::string, std::string>> device_allow_entries(const std::vector<WantedDevice>& devices) {
  std::vector<std::pair<std::string, std::string>> entries;
  for (const auto& d : devices) {
    const std::string access = format_access(d.access);
    if (access.empty()) continue;
    // systemd parses /dev/char/M:m and /dev/block/M:m textually: no node needs to exist.
    const std::string prefix = d.dev.type == DeviceType::kBlock ? "/dev/block/" : "/dev/char/";
    entries.emplace_back(prefix + format_device_number(d.dev), access);
  }
  return entries;
}

Result<std::unique_ptr<SystemdClient>> SystemdClient::connect(const std::string& address, sd_event* event,
                                                              std::chrono::milliseconds timeout) {
  auto client = std::make_unique<SdBusSystemdClient>(address, event, timeout);
  if (auto opened = client->open_bus(); !opened) return opened.error();
  return std::unique_ptr<SystemdClient>(std::move(client));
}

}  // namespace gdw
