// `gpu-devwatch run`: a small manager, after systemd-oomd's. It owns the event loop, the
// signals, the resync and heartbeat timers and the configuration reload, and reacts to what
// its parts report:
//   NodeInputs (node_inputs.h)            the kubepods tree's location, inventory,
//                                         checkpoint, bundles; what their directories'
//                                         events changed
//   ContainerFleet (container_fleet.h)    the containers: their life cycle, watches,
//                                         checks and repairs, the eBPF probe, systemd
//   NodeHealthMonitor (node_health_monitor.h)  PodResources, device plugins, a stale
//                                         checkpoint
//   NvmlRunner (nvml_runner.h)            NVML in a child process
//   kube::KubeReporting                   Kubernetes Events, node conditions, the pod
//                                         readiness gate
// A full resync (startup, periodic, SIGHUP, SIGUSR1, lost events) reads every input again
// and hands the tree to the fleet.
#pragma once

#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "core/config.h"
#include "kube/kube_reporting.h"
#include "metrics/loop_health.h"
#include "metrics/metrics.h"
#include "service/container_fleet.h"
#include "service/node_health_monitor.h"
#include "service/node_inputs.h"
#include "service/nvml_runner.h"
#include "watch/event_loop.h"

namespace gdw {

class Daemon {
 public:
  Daemon(Config config, std::string config_path);
  ~Daemon();
  // Runs until SIGTERM/SIGINT; returns the exit code.
  int run();

 private:
  Status start();
  Status start_signals();
  // The periodic resync, and the heartbeat /healthz reads (a top-priority timer records
  // each turn of the loop).
  Status start_timers();
  // The event loop thread's scheduling (daemon.event_loop_fifo_priority, else
  // daemon.event_loop_slice_us), logged once per start or reload.
  void apply_loop_scheduling();
  // The node's inputs, its container fleet and its health checks, made anew from config_.
  Status start_node();
  void reload_config();
  void full_resync(const std::string& reason);
  void on_input_changes(const InputChanges& changes);
  void on_nvml_answer(std::optional<NvmlAnswer> answer, Clock::time_point started);
  void on_health_change(HealthChange change);
  // Sends READY=1 (once) when the first full pass is done and every allocation record is in.
  void notify_ready_when_settled();
  // Kubernetes Events, node conditions and the readiness gate (re)started with the
  // configuration (a SIGHUP's carries the conditions' memory over); the fleet reports there.
  void start_events();

  Config config_;
  std::string config_path_;
  std::unique_ptr<EventLoop> loop_;
  LoopHeartbeat heartbeat_;  // before metrics_: its HTTP threads read it until they stop
  Metrics metrics_;
  EventSource heartbeat_timer_;
  std::vector<EventSource> signal_sources_;
  EventSource resync_timer_;
  std::unique_ptr<NvmlRunner> nvml_;
  std::unique_ptr<NodeInputs> inputs_;
  EventSource inputs_source_;
  std::unique_ptr<ContainerFleet> fleet_;          // refers to inputs_' model
  std::unique_ptr<NodeHealthMonitor> health_;      // refers to inputs_, fleet_, nvml_
  std::unique_ptr<kube::KubeReporting> kube_;      // last: its workers stop first
  bool ready_notified_ = false;  // READY=1 sent
  bool loop_fifo_ = false;       // the loop thread runs under the SCHED_FIFO this daemon asked for
};

int run_daemon(const std::string& config_path);

}  // namespace gdw
