// Reporting what the repair loop did, for one container at a time: metrics, log lines and
// Kubernetes Events. A repair's log line waits briefly for the probe's record of who
// revoked (kAttributionWait), then names the writer. In a fight loop every repair is still
// made at once, but the journal gets the first repair.log_burst lines of a container and
// then one line per repair.log_interval that counts the others (RepairLogLimit decides;
// this writes).
#pragma once

#include <string>
#include <vector>

#include "core/config.h"
#include "kube/event_reporter.h"
#include "metrics/daemon_metrics.h"
#include "metrics/repair_metrics.h"
#include "service/container_table.h"
#include "service/repair_step.h"
#include "watch/event_loop.h"

namespace gdw {

class RepairReport {
 public:
  RepairReport(const Config& config, EventLoop& loop, ContainerTable& containers, Metrics& metrics)
      : config_(config), loop_(loop), containers_(containers), metrics_(metrics), daemon_metrics_(metrics) {}

  // Events go out through `events` (null: off); `probe_loaded`: a repair's log line may
  // wait for the probe's record of who revoked.
  void set_reporting(kube::EventReporter* events, bool probe_loaded) {
    events_ = events;
    probe_loaded_ = probe_loaded;
  }

  // What the plan decided beside grants: observe mode, the fight-loop guard.
  void plan(WatchedContainer& w, const RepairStep& step);
  // The grants of a step: metrics, warnings, refusals, and the repair's log line (now, or
  // once the probe named the writer). Takes the step's granted devices.
  // `granted_at`: when the grant was written (the repair time counted ends there).
  void grants(WatchedContainer& w, RepairStep& step, Clock::time_point trigger, Clock::time_point granted_at);
  // The probe just named who revoked `w`'s devices: a log line waiting for it goes out.
  void named(WatchedContainer& w);
  // systemd answered a call adding `devices` to `unit`'s DeviceAllow=.
  void persisted(const WatchedContainer& w, const std::vector<WantedDevice>& devices, const std::string& unit,
                 const Status& outcome);

 private:
  void refusals(WatchedContainer& w, const SettledGrants& settled);
  void log_grants(WatchedContainer& w);
  void wait_for_attribution(WatchedContainer& w);
  void schedule_summary(WatchedContainer& w, Clock::time_point at);
  void log_summary(WatchedContainer& w);
  void event(const WatchedContainer& w, kube::Cause cause, const std::vector<WantedDevice>& devices,
             const std::string& problem = "");

  const Config& config_;
  EventLoop& loop_;
  ContainerTable& containers_;
  RepairMetrics metrics_;
  DaemonMetrics daemon_metrics_;
  kube::EventReporter* events_ = nullptr;
  bool probe_loaded_ = false;
};

}  // namespace gdw
