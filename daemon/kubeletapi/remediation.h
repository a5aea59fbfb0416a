// Remediation of a stale device-manager checkpoint (kubelet.remediate_stale_checkpoint, off
// by default): move the file aside, then have systemd restart kubelet, which then starts its
// device manager from what the plugins report now instead of devices this host does not
// have. The file is renamed, never deleted, so an operator can inspect it; the restart is an
// asynchronous D-Bus call on the daemon's sd-event loop, bounded by systemd.timeout, so a
// hung bus or systemd never stalls the loop.
#pragma once

#include <chrono>
#include <functional>
#include <memory>
#include <optional>
#include <string>

#include "core/config.h"
#include "core/result.h"

struct sd_bus;
struct sd_bus_slot;
struct sd_event;
struct sd_event_source;

namespace gdw {

// Renames <checkpoint_path> to <checkpoint_path>.stale-<UTC time, 20250131T235959Z> and
// returns the new path. Never overwrites (two moves in one second: the second fails) and
// never deletes: when the rename fails, the file stays where it was.
Result<std::string> move_checkpoint_aside(const std::string& checkpoint_path,
                                          std::chrono::system_clock::time_point now);

struct UnitRestartOptions {
  std::string bus_address;  // systemd.bus_address; empty: the system bus
  std::string unit;         // kubelet.unit
  Duration timeout{2000};   // systemd.timeout: from start() to systemd's answer
};

// One org.freedesktop.systemd1.Manager.RestartUnit(<unit>, "replace") on an sd-event loop.
class UnitRestart {
 public:
  // Called exactly once, from the loop (never inside start()), with the object path of the
  // job systemd queued, or why there is none: the bus could not be reached, a D-Bus error
  // (name and message), or no answer within the timeout.
  using Done = std::function<void(Result<std::string> job)>;

  // Fails only when the loop cannot take the call's event sources.
  static Result<std::unique_ptr<UnitRestart>> start(sd_event* event, UnitRestartOptions options, Done done);
  // Abandons a call still pending (done is then not called). May run inside done.
  ~UnitRestart();
  UnitRestart(const UnitRestart&) = delete;
  UnitRestart& operator=(const UnitRestart&) = delete;

 private:
  UnitRestart(sd_event* event, UnitRestartOptions options, Done done);
  void call();
  void finish(Result<std::string> outcome);
  std::string where() const;
  friend struct UnitRestartCallbacks;  // the C callbacks, in the .cpp (sd-bus types stay there)

  sd_event* event_;
  UnitRestartOptions options_;
  Done done_;
  sd_bus* bus_ = nullptr;
  sd_bus_slot* pending_ = nullptr;
  sd_event_source* timer_ = nullptr;
  sd_event_source* deliver_ = nullptr;
  std::optional<Result<std::string>> outcome_;
};

struct RemediationOptions {
  std::string checkpoint_path;  // kubelet.checkpoint
  UnitRestartOptions restart;
};

struct RemediationStarted {
  std::string moved_to;
  std::unique_ptr<UnitRestart> restart;  // its Done reports the restart
};

// Moves the checkpoint aside, then requests the restart. An Error means nothing was
// restarted: the move failed (the file is untouched) or the loop could not take the call.
Result<RemediationStarted> start_remediation(sd_event* event, const RemediationOptions& options,
                                             std::chrono::system_clock::time_point now, UnitRestart::Done done);

}  // namespace gdw
