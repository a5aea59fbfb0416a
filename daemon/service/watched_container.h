// What the daemon keeps per container cgroup, by concern: who it is and what it must have
// (identity), its inotify watches, the repair planner's state (core/repair_plan.h), who
// revoked (attribution), its repair log limit and its timers.
#pragma once

#include <array>
#include <cstdint>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "backend/device_programs_v2.h"
#include "core/apply_wait.h"
#include "core/repair_plan.h"
#include "core/revocation.h"
#include "log/log.h"
#include "metrics/container_labels.h"
#include "node/container_target.h"
#include "runtime/discovery.h"
#include "watch/event_loop.h"

namespace gdw {

// What one container adds to the daemon's gauge counts, as last counted (service/gauges.h):
// kept in the container, so that the counts can take it out again when it changes or goes.
struct GaugeShare {
  bool counted = false;  // in the sums now
  bool gpu = false, missing = false, throttled = false, unidentified = false, identity_conflict = false;
  // Missing devices, or unidentified: listed for the node conditions.
  bool problem() const { return missing || unidentified; }
  std::uint32_t unresolved_cdi = 0;
  std::array<std::uint32_t, std::size(kProgramOwners)> programs{};  // by owner
  std::string identity_problem;  // with identity_conflict
};

struct WatchedContainer {
  WatchedContainer(DiscoveredContainer cg, RepairBudget b, RepairLogLimit l)
      : cgroup(std::move(cg)), repair(b), log_limit(l) {}

  // Identity: the cgroup and what resolving it said.
  DiscoveredContainer cgroup;
  ContainerTarget target;
  ContainerLabels labels;
  std::optional<std::uint64_t> resolved_generation;  // NodeModel::generation() of `target`
  int identify_attempts = 0;
  std::uint64_t cgroup_id = 0;  // inode of the cgroup directory (what the probe reports)
  Clock::time_point first_seen = Clock::now();

  // Watches: set up as a GPU container (logged, its rule files watched, the probe told).
  bool watching = false;
  std::vector<int> wds;
  int create_wd = -1;  // the bundle directory, while its create's pid file is not there
  std::vector<int> restoring_wds;  // while devices are missing (DeviceAccess::restoring_rule_files)

  // Never act inside a runtime's apply (core/apply_wait.h): the wait's state; for a
  // container that appeared while the daemon ran, the runtime's pid file whose appearance
  // says its create ended (empty: none is waited for).
  ApplyWaitState apply_wait;
  bool appeared_while_running = false;
  std::string create_marker;
  bool create_ended = false;
  // Its create is waited for and has not been seen to end.
  bool creating() const { return !create_ended && !create_marker.empty(); }

  // Repair: drift, back-off, the fight-loop guard, systemd persistence.
  RepairState repair;
  ProgramCounts programs;  // device programs attached at the last check
  GaugeShare gauge_share;  // what the gauges counted of it last (GaugeTally)

  // Attribution: the last write that revoked devices here, as the probe saw it; deny-rule
  // writes seen while it was not (yet) a GPU container.
  std::optional<Revocation> last_revocation;
  PendingRevocations pending_revocations;
  // When the last check began: a revocation seen after it is the next check's to answer.
  Clock::time_point last_check{};
  // The last revoking write is `a` to devices.deny (every device denied: how runc, systemd
  // and the CPUManager re-apply), seen after the last check: all the container wants is
  // missing, known without reading devices.list (repair_step.h).
  bool all_denied_since_last_check() const {
    return last_revocation && last_revocation->rule && last_revocation->rule->type == DeviceType::kAll &&
           last_revocation->at > last_check;
  }

  // A repair whose log line waits (briefly) for the probe to say who revoked.
  struct UnloggedRepair {
    std::vector<WantedDevice> grants;
    Clock::time_point trigger{};
    Clock::duration repair_time{};  // of the first of those grants: for the Event
  } unlogged;
  // Repairs get a line each only up to repair.log_burst, then one per repair.log_interval
  // (repair_report.cpp).
  RepairLogLimit log_limit;

  // Probe reports beside repairs.
  std::map<std::string, Clock::time_point> denied_open_logged;  // device → last log
  std::uint64_t other_denied_opens_seen = 0;  // the probe's per-cgroup count, as last read

  // Timers.
  EventSource retry;                  // deferred repair or identification retry
  Clock::time_point retry_at{};       // when `retry` fires, while armed
  Clock::time_point pending_since{};  // the oldest trigger a deferred repair still owes
  EventSource log_timer;              // the attribution wait of a repair's log line
  EventSource log_summary_timer;      // the count of repairs not logged

  bool is_gpu() const { return target.kind == TargetKind::kGpu; }
  // What this container's gauge share is made of (service/gauges.h): a check that leaves
  // it as it was (a storm's revoke-and-repair, a v2 re-apply repaired) needs no new count;
  // one that moves it has only this container's share read again (GaugeTally). In two
  // parts: what a repair changes, taken before each one, and what resolving the container
  // changes, taken only around the resolve that follows a grant (no string copies before
  // the grant).
  struct GaugeInputs {
    struct Repair {
      bool missing = false, throttled = false;
      ProgramCounts programs;
      bool operator==(const Repair&) const = default;
    } repair;
    struct Target {
      TargetKind kind = TargetKind::kUnidentified;
      bool identity_conflict = false;
      std::size_t unresolved_cdi = 0;
      ContainerLabels labels;
      std::string problem;
      bool operator==(const Target&) const = default;
    } target;
    bool operator==(const GaugeInputs&) const = default;
  };
  GaugeInputs::Repair repair_gauge_inputs() const { return {!repair.missing.empty(), repair.throttled, programs}; }
  GaugeInputs::Target target_gauge_inputs() const {
    return {target.kind, target.identity_conflict, target.desired.unresolved_cdi.size(), labels, target.problem};
  }
  GaugeInputs gauge_inputs() const { return {repair_gauge_inputs(), target_gauge_inputs()}; }
  std::optional<Clock::time_point> retry_armed_at() const {
    return retry.armed() ? std::optional(retry_at) : std::nullopt;
  }
  log::Fields log_fields() const {
    log::Fields f;
    f.pod_namespace = labels.pod_namespace;
    f.pod = labels.pod;
    f.container = labels.container;
    f.cgroup = cgroup.cgroup_dir;
    return f;
  }
};

}  // namespace gdw
