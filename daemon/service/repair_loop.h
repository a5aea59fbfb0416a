// The repair loop for one container: observe → plan → apply (repair_step.h, the same code
// `check --repair` runs) → report (repair_report.h). It returns what its owner (the
// container fleet) must do next: drop a vanished container, look again later, persist
// what it granted in the systemd scope. It calls nobody back.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "backend/device_access.h"
#include "core/config.h"
#include "core/repair_plan.h"
#include "kube/event_reporter.h"
#include "service/attribution.h"
#include "service/container_table.h"
#include "service/cpu_handover.h"
#include "service/repair_report.h"
#include "service/repair_step.h"
#include "watch/event_loop.h"

namespace gdw {

// What one check asks of its owner.
struct CheckOutcome {
  bool gone = false;  // the cgroup vanished: drop the container (nothing was counted)
  // Look at the container again then (a back-off, the guard, a refused grant).
  std::optional<Clock::time_point> retry_at;
  // systemd driver: what this check granted, for the scope's DeviceAllow= once its unit
  // files are read again (core/repair_plan.h: plan_persistence).
  std::vector<WantedDevice> granted;
  // A grant went out and the device access has work that makes the next one faster
  // (DeviceAccess::prepare_next_grant): run it after the tenant has had its devices back,
  // not in this dispatch.
  bool prepare_next_grant = false;
  bool deferred = false;  // RepairStep::deferred: read the probe, then check again
};

// Who a check names if it finds devices newly missing: a revocation already known, or a
// device program change (probe record) whose revocation is put together only then, after
// the grant: nothing of it on the reaction's path.
struct CheckCause {
  const Revocation* revocation = nullptr;
  const DeviceProgramEvent* program_change = nullptr;
  bool program_change_on_subgroup = false;  // made on crun's sub-cgroup of the container
  // The probe's records (-1: none), readable while some wait unread. In enforce mode a
  // look that finds devices missing while some wait defers (RepairStep::deferred), unless
  // the check comes right after a read (`after_wait`); after a grant the loop hands its CPU
  // over for a moment (CpuHandover) unless some wait.
  int records_fd = -1;
  bool after_wait = false;  // the check a wait (or a deferral) held, made right after a read
};

class RepairLoop {
 public:
  RepairLoop(const Config& config, const RepairSettings& settings, EventLoop& loop, ContainerTable& containers,
             Metrics& metrics, Attribution& attribution)
      : config_(config), settings_(settings), loop_(loop), metrics_(metrics), daemon_metrics_(metrics),
        attribution_(attribution), report_(config, loop, containers, metrics) {}

  void set_reporting(kube::EventReporter* events, bool probe_loaded) { report_.set_reporting(events, probe_loaded); }

  // One check of `w`. `cause`: who changed its device access, when the caller knows;
  // named for devices this check finds newly missing.
  CheckOutcome check(DeviceAccess& access, WatchedContainer& w, Clock::time_point trigger,
                     const CheckCause& cause = {});
  // The probe just named who revoked `w`'s devices: a log line waiting for it goes out.
  void revocation_named(WatchedContainer& w) { report_.named(w); }
  // A call adding `devices` to the DeviceAllow= of `w`'s scope started / was answered.
  void persist_started(WatchedContainer& w);
  void persist_answered(WatchedContainer& w, const std::vector<WantedDevice>& devices, const std::string& unit,
                        const Status& outcome);

 private:
  const Config& config_;  // the running one: daemon.grant_handover_us follows a SIGHUP
  const RepairSettings& settings_;
  EventLoop& loop_;
  CpuHandover handover_;
  RepairMetrics metrics_;
  DaemonMetrics daemon_metrics_;
  Attribution& attribution_;
  RepairReport report_;
};

}  // namespace gdw
