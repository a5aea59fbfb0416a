// What to do about one container's devices, decided from what was observed: the planner
// of the repair loop (observe → plan → apply → report). Pure: no system calls, time passed
// in; the daemon and `check --repair` run it the same way (service/repair_step.h).
//
// Two steps around the grant itself:
// - plan_repair: from the missing devices, which drift transitions to count, whether
//   observe mode only reports, which devices to grant now (refused grants wait for their
//   back-off, the fight-loop guard's token bucket may hold all back) and when to look again.
// - settle_grants: from the backend's outcomes, what was granted, which refusals to report
//   (once until a grant succeeds), when to retry, and which devices to persist in the
//   systemd scope's DeviceAllow= (systemd cgroup driver).
#pragma once

#include <map>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "core/clock.h"
#include "core/config.h"
#include "core/desired_state.h"
#include "core/device_set.h"
#include "core/log_once.h"
#include "core/repair_policy.h"
#include "core/result.h"

namespace gdw {

struct RepairSettings {
  Mode mode = Mode::kEnforce;
  Clock::duration rejected_backoff{};  // repair.rejected_backoff
  // While systemd re-applies a scope after our SetUnitProperties its own writes revoke
  // for a moment: not counted as drift for this long after the call's answer.
  Clock::duration systemd_settle = std::chrono::milliseconds(100);
  Clock::duration systemd_timeout{};   // systemd.timeout
  static RepairSettings from(const Config& config);
};

// What the planner remembers of one container between checks.
struct RepairState {
  explicit RepairState(RepairBudget b) : budget(b) {}
  DeviceSet missing;  // as of the last check
  // Grants the kernel refused (a parent denies): not retried before the back-off ends,
  // reported once until one succeeds.
  std::map<DeviceNumber, Clock::time_point> refused_until;
  LogOncePer<DeviceNumber> refused_reported;
  RepairBudget budget;  // the fight-loop guard
  bool throttled = false;
  LogOnce observe_reported;
  LogOnce read_error_reported;
  // No drift counted before this (systemd re-applying the scope after our call).
  Clock::time_point quiet_until{};
  // systemd driver: the devices already in the scope's DeviceAllow=, and whether a call
  // adding more is under way.
  DeviceSet persisted;
  bool persist_in_flight = false;
};

struct RepairPlan {
  std::vector<WantedDevice> drifted;  // went missing since the last check: count as drift
  std::vector<WantedDevice> grant;    // ask the backend for these now
  std::optional<Clock::time_point> retry_at;  // look again then (back-off, guard)
  bool throttled = false;             // the guard holds the grants back
  std::vector<WantedDevice> held;     // those it holds back
  bool report_throttled = false;      // it just engaged: log + event
  bool report_unthrottled = false;    // it just let go: log
  bool report_observed = false;       // observe mode, first sighting: log + event
};

// Whether a check now would only find the guard still holding the container back: a
// deferred repair (retry at `retry_at`, when armed) comes when the next token does, so
// re-reading after every write of a fight loop would only burn CPU.
bool held_back(const RepairState& state, std::optional<Clock::time_point> retry_at, Clock::time_point now);

// `missing`: the wanted devices the container's device policy denies now.
RepairPlan plan_repair(RepairState& state, const std::vector<WantedDevice>& missing, Clock::time_point now,
                       const RepairSettings& settings);

struct DeviceOutcome {
  WantedDevice device;
  Status outcome;  // error code EPERM: refused; ENOENT/ENODEV: the cgroup is gone
};

struct SettledGrants {
  std::vector<WantedDevice> granted;
  std::vector<std::pair<WantedDevice, Error>> report_refused;  // first refusal: log + event
  std::optional<Clock::time_point> retry_at;
  bool gone = false;  // the cgroup vanished mid-repair
  // systemd driver: add these to the scope's DeviceAllow= (nothing while a call is under way).
  std::vector<WantedDevice> persist;
};

// `persistable`: the container's scope is a systemd unit; `wanted`: all it should have.
SettledGrants settle_grants(RepairState& state, const std::vector<DeviceOutcome>& outcomes,
                            const std::vector<WantedDevice>& wanted, bool persistable, Clock::time_point now,
                            const RepairSettings& settings);

// A persistence call started / answered (`ok`): what the state keeps of it.
void persist_started(RepairState& state, Clock::time_point now, const RepairSettings& settings);
void persist_answered(RepairState& state, const std::vector<WantedDevice>& devices, bool ok, Clock::time_point now,
                      const RepairSettings& settings);

bool is_cgroup_gone(const Error& e);

// Texts of the plan's reports.
std::string device_names(const std::vector<WantedDevice>& devices);  // "nvidia0,nvidia-uvm"
std::string grant_rules_text(const std::vector<WantedDevice>& devices);  // "c 195:0 rw; ..."

}  // namespace gdw
