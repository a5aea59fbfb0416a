// The repair loop for one container: observe → plan → apply (repair_step.h, the same code
// `check --repair` runs) → report: metrics, log lines (which wait briefly for the probe to
// say who revoked, and are rate-limited apart from the repairs themselves), Kubernetes
// Events, and under the systemd driver the grant persisted in the scope.
//
// What the loop cannot do itself goes through Hooks to its owner (the daemon): dropping a
// vanished container, arming its retry timer, watching its restoring writes, and looking
// again after systemd answered.
#pragma once

#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "backend/device_access.h"
#include "core/config.h"
#include "core/repair_plan.h"
#include "kube/event_reporter.h"
#include "metrics/metrics.h"
#include "service/attribution.h"
#include "service/container_table.h"
#include "service/repair_step.h"
#include "service/systemd_persistence.h"
#include "watch/event_loop.h"

namespace gdw {

class RepairLoop {
 public:
  struct Hooks {
    std::function<void(const std::string& cgroup_dir)> gone;  // the cgroup vanished mid-repair
    // Look at `w` again after `delay`; `trigger`: the oldest change that look still answers.
    std::function<void(WatchedContainer& w, Clock::duration delay, Clock::time_point trigger)> retry;
    std::function<void(WatchedContainer& w)> checked;  // after every completed check
    std::function<void(WatchedContainer& w)> persisted;  // systemd changed the scope's DeviceAllow=
  };

  RepairLoop(const Config& config, const RepairSettings& settings, EventLoop& loop, ContainerTable& containers,
             Metrics& metrics, Attribution& attribution, Hooks hooks);

  // Events go out through `events` (null: off); `probe_loaded`: a repair's log line may
  // wait for the probe's record of who revoked.
  void set_reporting(kube::EventReporter* events, bool probe_loaded) {
    events_ = events;
    probe_loaded_ = probe_loaded;
  }
  // systemd cgroup driver: where grants are persisted (null: nowhere).
  void set_persistence(SystemdPersistence* persistence) { persistence_ = persistence; }

  // One check of `w`. `cause`: who changed its device access, when the caller knows;
  // named for devices this check finds newly missing. false: the cgroup vanished and `w`
  // was handed to Hooks::gone (it may no longer exist).
  bool check(DeviceAccess& access, WatchedContainer& w, Clock::time_point trigger, const Revocation* cause = nullptr);
  // The probe just named who revoked `w`'s devices: a log line waiting for it goes out.
  void revocation_named(WatchedContainer& w);

 private:
  void report_plan(WatchedContainer& w, const RepairStep& step, Clock::time_point trigger);
  void report_grants(WatchedContainer& w, RepairStep& step, Clock::time_point trigger);
  void report_refusals(WatchedContainer& w, const SettledGrants& settled);
  void persist(WatchedContainer& w, const std::vector<WantedDevice>& devices);
  void persist_answered(const std::string& dir, const std::vector<WantedDevice>& devices, const std::string& unit,
                        const Status& outcome);

  // repair_report.cpp: log lines and Events.
  void log_grants(WatchedContainer& w);
  void wait_for_attribution(WatchedContainer& w);
  void schedule_repair_log_summary(WatchedContainer& w, Clock::time_point at);
  void log_repair_summary(WatchedContainer& w);
  void report_event(const WatchedContainer& w, kube::Cause cause, const std::vector<WantedDevice>& devices,
                    const std::string& problem = "");

  const Config& config_;
  const RepairSettings& settings_;
  EventLoop& loop_;
  ContainerTable& containers_;
  Metrics& metrics_;
  Attribution& attribution_;
  Hooks hooks_;
  kube::EventReporter* events_ = nullptr;
  bool probe_loaded_ = false;
  SystemdPersistence* persistence_ = nullptr;
};

}  // namespace gdw
