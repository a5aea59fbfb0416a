// `gpu-devwatch run`: one sd-event loop that keeps every GPU container's device policy
// allowing what its allocation record names.
//
// Triggers: inotify on each GPU container's rule files (cgroup v1), on the kubepods tree
// (containers appear and go), on the pod/QoS devices.deny files (a parent deny silently
// strips children), on the checkpoint directory (kubelet replaces the file by rename), on
// the runtime bundle dirs, the dev root and the CDI spec dirs; the eBPF probe's records;
// systemd's Reloading; SIGHUP reloads the configuration; a slow periodic resync catches
// anything events missed.
//
// Where things are (one job per file):
//   daemon.cpp             start, signals, reload, the heartbeat
//   daemon_inputs.cpp      full resync, inotify events, the kubepods tree, checkpoint
//   daemon_containers.cpp  the container table: add, resolve, remove, retry timers
//   daemon_gauges.cpp      gauges (counted by gauges.h), identity problems
//   daemon_cdi.cpp, daemon_node_health.cpp
// and its parts, each a class of its own: repair_loop.h (observe → plan → apply → report),
// attribution.h (who revoked), probe_link.h (the eBPF probe), systemd_persistence.h,
// container_table.h, watch_registry.h, nvml_runner.h, node_health.h, gauges.h.
#pragma once

#include <unistd.h>

#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>

#include "backend/device_access.h"
#include "core/config.h"
#include "core/log_once.h"
#include "kube/kube_reporting.h"
#include "metrics/loop_health.h"
#include "metrics/metrics.h"
#include "node/node_model.h"
#include "service/attribution.h"
#include "service/container_table.h"
#include "service/node_health.h"
#include "service/nvml_runner.h"
#include "service/probe_link.h"
#include "service/repair_loop.h"
#include "service/systemd_persistence.h"
#include "service/watch_registry.h"
#include "watch/event_loop.h"
#include "watch/inotify.h"

namespace gdw {

class Daemon {
 public:
  Daemon(Config config, std::string config_path);
  ~Daemon();
  // Runs until SIGTERM/SIGINT; returns the exit code.
  int run();

 private:
  using Watched = WatchedContainer;

  // daemon.cpp
  Status start();
  Status start_signals();
  Status start_timers();
  // /healthz: a top-priority timer records each turn of the loop.
  Status start_heartbeat();
  // The event loop thread's scheduler slice (daemon.event_loop_slice_us), logged once per
  // start or reload.
  void apply_loop_slice();
  void stop(int code);
  void start_node(const Config& config);
  void reload_config();

  // daemon_inputs.cpp
  void full_resync(const std::string& reason);
  bool locate_tree();
  void ensure_input_watches();
  void watch_tree_dir(const std::string& dir);
  void on_inotify();
  // What a watched path's event asks for; devices to check go to `dirty`.
  void on_watch_event(const WatchTarget& target, const Inotify::Event& ev, Clock::time_point trigger,
                      std::vector<std::string>& dirty);
  void on_tree_event(const std::string& dir, const Inotify::Event& ev);
  void dir_created(const std::string& path);
  void reload_checkpoint();
  void reload_inventory();
  // Starts a NVML query when an allocated MIG device is unmapped (or `force`); true while
  // one is under way.
  bool maybe_query_nvml(bool force = false);

  // daemon_containers.cpp
  // `check_new`: a new GPU container is checked at once (false: the caller checks them all).
  void upsert_container(const DiscoveredContainer& cg, bool check_new = true);
  void remove_container(const std::string& cgroup_dir);
  // Re-resolves who the container is and what it must have, unless nothing it depends on
  // changed since (NodeModel::generation()).
  void resolve(Watched& w, bool force);
  void apply_target(Watched& w, ContainerTarget target);
  void start_watching(Watched& w);
  void stop_watching(Watched& w);
  void reresolve_all();
  void check_all(Clock::time_point trigger, const std::function<bool(const Watched&)>& which);
  // true: a check changed what the gauges count (or dropped a container).
  bool check_dirs(Clock::time_point trigger, const std::vector<std::string>& dirs);
  bool check_ids(Clock::time_point trigger, const std::vector<std::uint64_t>& cgroup_ids);
  // Whether the check moved what the gauges count (or dropped the container).
  bool check_one(Watched& w, Clock::time_point trigger);
  void check_gpu_containers();
  void schedule_retry(Watched& w, Clock::duration delay, Clock::time_point trigger);
  void on_retry(const std::string& dir);
  // The discovered container cgroups, for the stale-checkpoint remediation's holders check
  // (daemon_node_health.cpp).
  std::vector<RunningContainer> running_containers() const;
  // Sends READY=1 (once) when the first full pass is done and every allocation record is
  // in (daemon_node_health.cpp).
  void notify_ready_when_settled();

  // The repair loop (repair_loop.h) on `w`, through the node's device access.
  // false: the cgroup vanished and the container was dropped.
  bool check_and_repair(Watched& w, Clock::time_point trigger, const Revocation* cause = nullptr);
  // Watches DeviceAccess::restoring_rule_files while `w` misses devices, and only then.
  void watch_restoring_writes(Watched& w);
  RepairLoop::Hooks repair_hooks();

  // daemon_gauges.cpp
  void update_gauges();
  // After a turn that may have changed them: the gauges are refreshed once, kGaugeDelay
  // later, not after every inotify batch of a storm (each refresh walks every container).
  void gauges_changed();
  EventSource gauge_timer_;
  // CDI spec errors (logged once each while they last) and unresolved CDI names (counted
  // by count_gauges): metrics (daemon_cdi.cpp).
  void report_cdi(std::size_t unresolved_names);
  std::set<std::string> cdi_errors_logged_;

  ProbeLink::Hooks probe_hooks();
  // cgroup_mkdir from the probe: a new container, faster than inotify (which stays the
  // fallback; dir_created() is idempotent).
  void on_cgroup_created(std::uint32_t hierarchy_id, const std::string& path);

  // Kubernetes Events, node conditions and the readiness gate (re)started with the
  // configuration; the repair loop reports through the events.
  void start_events();

  Config config_;
  RepairSettings repair_settings_;
  std::string config_path_;
  std::unique_ptr<NodeModel> node_;
  std::unique_ptr<DeviceAccess> access_;  // the node's device policy (v1 or v2), once located
  std::unique_ptr<NodeHealthMonitor> health_;  // refers to node_: rebuilt with it
  double newest_container_start_ = 0;
  std::unique_ptr<EventLoop> loop_;
  std::optional<Inotify> inotify_;
  LoopHeartbeat heartbeat_;  // before metrics_: its HTTP threads read it until they stop
  Metrics metrics_;

  EventSource inotify_source_;
  EventSource resync_timer_;
  EventSource heartbeat_timer_;
  std::vector<EventSource> signal_sources_;

  std::optional<WatchRegistry> watches_;
  ContainerTable containers_;
  bool located_ = false;
  LogOnce locate_error_;
  LogOncePer<std::string> identity_problems_;  // ambiguous names, bundle conflicts
  bool ready_ = false;
  bool ready_notified_ = false;  // READY=1 sent

  Attribution attribution_{containers_, metrics_};
  std::optional<SystemdPersistence> persistence_;
  std::optional<RepairLoop> repair_;
  std::optional<ProbeLink> probe_;
  // The hierarchy id cgroup_mkdir reports for the tree we watch (cgroup2 is 0).
  std::optional<std::uint32_t> tree_hierarchy_id_;
  EventSource program_query_timer_;

  std::unique_ptr<NvmlRunner> nvml_;
  std::unique_ptr<kube::KubeReporting> kube_;  // last: its workers stop first
};

int run_daemon(const std::string& config_path);

}  // namespace gdw
