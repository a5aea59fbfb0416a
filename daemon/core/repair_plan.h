// What to do about one container's devices, decided from what was observed: the planner
// of the repair loop (observe → plan → apply → report). Pure: no system calls, time passed
// in; the daemon and `check --repair` run it the same way (service/repair_step.h).
//
// Two steps around the grant itself:
// - plan_repair: from the missing devices, which drift transitions to count, whether
//   observe mode only reports, which devices to grant now (refused grants wait for their
//   back-off, the fight-loop guard's token bucket may hold all back) and when to look again.
// - settle_grants: from the backend's outcomes, what was granted, which refusals to report
//   (once until a grant succeeds), when to retry.
// And beside them, plan_persistence: which devices to add to the systemd scope's
// DeviceAllow= (systemd cgroup driver) so that systemd's own re-apply keeps them.
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
  // The same devices are asked of systemd again only this long after it last took them:
  // a scope whose unit files systemd.unit_dirs does not show would be asked at every look.
  Clock::duration persist_repeat = std::chrono::seconds(1);
  // A grant lost to a program attached during the repair (cgroup v2, a re-applier still at
  // work) is looked at again this soon; its own attach event usually comes first.
  Clock::duration raced_retry = std::chrono::milliseconds(1);
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
  // systemd driver: whether a call adding devices to the scope's DeviceAllow= is under way,
  // and the devices systemd last took, when.
  bool persist_in_flight = false;
  DeviceSet persisted_last;
  Clock::time_point persisted_at{};
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
};

// Outcome codes: ENOENT/ENODEV the cgroup is gone; EAGAIN a program attached during the
// repair denies again (looked at again after settings.raced_retry, not a refusal); any
// other error a refusal (settings.rejected_backoff).
SettledGrants settle_grants(RepairState& state, const std::vector<DeviceOutcome>& outcomes, Clock::time_point now,
                            const RepairSettings& settings);

struct PersistencePlan {
  std::vector<WantedDevice> devices;          // ask systemd to add these now
  std::optional<Clock::time_point> retry_at;  // or look again then (persist_repeat)
};
// systemd driver, for a scope that restricts devices: what to add to its DeviceAllow= now.
// `lacking`: the wanted devices its unit files lack (exposure), nullopt when they could not
// be read; `granted`: what a grant just restored. Unit files read, whatever they lack is
// added, before any harm; unread, the devices just granted. Nothing in observe mode. Nothing while a call is under
// way; the same devices again only settings.persist_repeat after systemd last took them.
PersistencePlan plan_persistence(const RepairState& state, const std::optional<std::vector<WantedDevice>>& lacking,
                                 const std::vector<WantedDevice>& granted, Clock::time_point now,
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
