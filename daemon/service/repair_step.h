// One pass of the repair loop for one container: observe → plan → apply. Reporting (log
// lines, metrics, Events, timers, the systemd call) is the caller's: the daemon's
// (repair_loop.h) or `check --repair`'s printout. Both run this same code.
#pragma once

#include <functional>
#include <optional>
#include <string>

#include "backend/device_access.h"
#include "core/repair_plan.h"

namespace gdw {

struct RepairStep {
  // What the check read; nothing (an empty state) when it took every wanted device as
  // missing without reading (`all_denied_seen` below).
  Result<DeviceState> observed = Error{"not observed"};
  RepairPlan plan;
  std::optional<GrantReport> applied;  // when the plan granted something
  SettledGrants settled;
  bool gone = false;  // the cgroup vanished (observing or granting)
  bool report_read_error = false;  // the observation failed, first time in a row: log it
  // Devices were missing while probe records waited unread (`unread_records_fd`): nothing
  // planned or granted; the owner reads them, then checks again.
  bool deferred = false;
};

// `all_denied_seen`: the probe saw every device denied (`a` to devices.deny) since the
// last check. Where the policy is in files and repairs are enforced, every wanted device is
// then taken as missing without reading the policy: each was, at that write, and granting
// one that a later write allowed again changes nothing. Whatever else was denied, all the
// container wants is granted, so it ends whole; a deny after the grant is a new event.
// `attached`: the probe saw that program attached to the container's cgroup since the last
// check (DeviceAccess::observe_attached).
// `unread_records_fd`: the probe's records (readable while some wait unread), or -1. A look
// that finds devices missing while records wait may have seen a runtime's apply that they
// name (its attach or write is recorded before anyone can see it): the step defers rather
// than grant inside that apply. `apply_going_on` (check --repair, which has no probe): asked
// after a look that finds devices missing, before any grant; true defers the step the same
// way (whatever took them was at work before that look, so it is found then).
RepairStep repair_once(DeviceAccess& access, RepairState& state, const std::string& cgroup_dir,
                       const DesiredDevices& desired, Clock::time_point now, const RepairSettings& settings,
                       bool all_denied_seen = false, const AttachedProgram* attached = nullptr,
                       int unread_records_fd = -1, const std::function<bool()>& apply_going_on = {});

}  // namespace gdw
