// systemd cgroup driver: the second half of a grant. The direct grant (DeviceAccess) has
// already restored access, in microseconds; this adds the devices to the container scope's
// DeviceAllow= so that systemd's next daemon-reload keeps them.
//
// Not a DeviceAccess decorator: the call is asynchronous (a D-Bus round trip, answered on
// the loop, possibly after a whole reload systemd is busy with), and its answer feeds the
// planner's state (core/repair_plan.h: in flight, quiet window). The planner decides what
// to persist; the repair loop calls this and hands the answer back to the planner.
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "backend/systemd_scope.h"
#include "core/config.h"
#include "core/log_once.h"

struct sd_event;

namespace gdw {

class SystemdPersistence {
 public:
  // `reload_finished`: systemd finished a daemon-reload (or the bus reconnected), which
  // re-applied every scope's device policy: every GPU container should be looked at.
  SystemdPersistence(const Config& config, sd_event* event, std::function<void()> reload_finished)
      : config_(config), event_(event), reload_finished_(std::move(reload_finished)) {}

  // Asks systemd to add `devices` to the DeviceAllow= of the scope holding `cgroup_dir`.
  // `answered(unit, outcome)` runs later on the loop, exactly once, when started (true).
  // false: nothing to do (no scope unit) or systemd unreachable (logged once here); an
  // Error: systemd refused to start the call.
  Result<bool> persist(const std::string& cgroup_dir, const std::vector<WantedDevice>& devices,
                 std::function<void(const std::string& unit, Status outcome)> answered);

  // Drops the connection (systemd.bus_address may change on reload).
  void reset() { client_.reset(); }

  // The same call for a one-shot command (`check --repair`), on a private loop, waited for
  // at most systemd.timeout (the call's own deadline ends it): the scope's unit name, or
  // why systemd did not add the devices.
  static Result<std::string> persist_blocking(const Config& config, const std::string& cgroup_dir,
                                              const std::vector<WantedDevice>& devices);

 private:
  SystemdClient* client();

  const Config& config_;
  sd_event* event_;
  std::function<void()> reload_finished_;
  std::unique_ptr<SystemdClient> client_;
  LogOnce connect_error_;
};

}  // namespace gdw
