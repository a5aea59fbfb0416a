// `gpu-devwatch run`: one sd-event loop that keeps every GPU container's v1 device cgroup
// allowing what its allocation record names.
//
// Triggers: inotify on each GPU container's devices.allow/devices.deny (any write → re-read
// devices.list → grant what is missing), on the kubepods tree (containers appear and go),
// on the pod/QoS devices.deny files (a parent deny silently strips children), on the
// checkpoint directory (kubelet replaces the file by rename), on the runtime bundle dirs,
// on the dev root (a control node created late); SIGHUP reloads the configuration; a slow
// periodic resync catches anything events missed.
#pragma once

#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>

#include "core/config.h"
#include "core/repair_policy.h"
#include "core/syscall_hook_schedule.h"
#include "metrics/loop_health.h"
#include "metrics/metrics.h"
#include "node/node_model.h"
#include "node/device_repair.h"
#include "nvidia/nvml.h"
#include "backend/systemd_scope.h"
#include "probe/probe.h"
#include "service/node_health.h"
#include "watch/event_loop.h"
#include "watch/inotify.h"
#include "kube/event_reporter.h"

namespace gdw {

class Daemon {
 public:
  Daemon(Config config, std::string config_path);
  ~Daemon();
  // Runs until SIGTERM/SIGINT; returns the exit code.
  int run();

 private:
  // What a watch descriptor is for.
  struct WatchTarget {
    enum Kind { kContainerFile, kTreeDir, kParentDenyFile, kCheckpointDir, kBundleDir, kDevDir, kCdiDir } kind;
    std::string path;  // the directory concerned
  };

  struct Watched {
    Watched(DiscoveredContainer cg, RepairBudget b, RepairLogLimit l)
        : cgroup(std::move(cg)), budget(b), log_limit(l) {}
    DiscoveredContainer cgroup;
    ContainerTarget target;
    ContainerLabels labels;
    bool watching = false;  // set up as a GPU container (logged, watched)
    std::vector<int> wds;   // v1: devices.allow and devices.deny
    RepairBudget budget;
    std::set<DeviceNumber> missing;  // as of the last check
    // Grants the kernel refused (a parent denies): not retried before the back-off ends,
    // logged once until one succeeds.
    std::map<DeviceNumber, Clock::time_point> refused_until;
    std::set<DeviceNumber> refused_logged;
    bool throttled = false;
    bool observed_logged = false;
    bool read_error_logged = false;
    EventSource retry;                 // deferred repair or identification retry
    Clock::time_point retry_at{};      // when `retry` fires, while armed
    Clock::time_point pending_since{};  // the oldest trigger a deferred repair still owes
    int identify_attempts = 0;
    std::uint64_t cgroup_id = 0;  // inode of the cgroup directory (what the probe reports)
    std::optional<std::uint64_t> resolved_generation;  // NodeModel::generation() of `target`
    std::map<ProgramOwner, std::size_t> programs;  // cgroup v2: attached at the last check
    // The last write that revoked devices here, as the probe saw it.
    struct Revocation {
      std::string writer;  // recognised name (bounded)
      std::string detail;  // pid, comm, executable, rule: for the log line
      Clock::time_point at{};
      pid_t tid = 0;               // rule writes: the writing thread and the probe's
      std::uint64_t ktime_ns = 0;  // timestamp, to match the result that may follow
    };
    std::optional<Revocation> last_revocation;
    // A repair whose log line waits (briefly) for the probe to say who revoked.
    std::vector<WantedDevice> unlogged_grants;
    Clock::time_point unlogged_trigger{};
    Clock::duration unlogged_repair_time{};  // of the first of those grants: for the Event
    EventSource log_timer;
    // Repairs get a line each only up to repair.log_burst, then one per repair.log_interval
    // (daemon_repair_log.cpp); the timer writes the count when no repair comes to carry it.
    RepairLogLimit log_limit;
    EventSource log_summary_timer;
    std::map<std::string, Clock::time_point> denied_open_logged;  // device → last log
    std::uint64_t other_denied_opens_seen = 0;  // the probe's per-cgroup count, as last read
    // systemd driver: the devices already added to the scope's DeviceAllow=.
    std::set<DeviceNumber> persisted;
    bool persist_in_flight = false;
    // While systemd re-applies the scope after our SetUnitProperties, its own writes revoke
    // for a moment: repaired, but not counted as drift.
    Clock::time_point quiet_until{};
  };

  Status start();
  // /healthz: a top-priority timer records each turn of the loop.
  Status start_heartbeat();
  void stop(int code);
  void start_node(const Config& config);
  void reload_config();

  void full_resync(const std::string& reason);
  void ensure_input_watches();
  void watch_tree_dir(const std::string& dir);
  int add_watch(const std::string& path, std::uint32_t mask, WatchTarget target);
  void drop_watch(int wd);

  void on_inotify();
  void on_tree_event(const std::string& dir, const Inotify::Event& ev);
  void dir_created(const std::string& path);
  void upsert_container(const DiscoveredContainer& cg);
  void remove_container(const std::string& cgroup_dir);
  // Re-resolves who the container is and what it must have, unless nothing it depends on
  // changed since (NodeModel::generation()).
  void resolve(Watched& w, bool force);
  void apply_target(Watched& w, ContainerTarget target);
  void reresolve_all();
  void reload_checkpoint();
  void reload_inventory();
  // Starts a NVML query when an allocated MIG device is unmapped (or `force`); true while
  // one is under way.
  bool maybe_query_nvml(bool force = false);
  // The discovered container cgroups, for the stale-checkpoint remediation's holders check
  // (daemon_node_health.cpp).
  std::vector<RunningContainer> running_containers() const;
  // Sends READY=1 (once) when the first full pass is done and every allocation record is
  // in: a GPU container only PodResources names is watched (and its revocations named)
  // only from its first answer on (daemon_node_health.cpp).
  void notify_ready_when_settled();

  // `cause`: who changed the container's device access, when the caller knows; named for
  // devices this check finds newly missing.
  void check_and_repair(Watched& w, Clock::time_point trigger, const Watched::Revocation* cause = nullptr);
  void check_all(Clock::time_point trigger, const std::function<bool(const Watched&)>& which);
  void schedule_retry(Watched& w, Clock::duration delay, Clock::time_point trigger);
  void update_gauges();
  // CDI spec errors (logged once each while they last) and unresolved CDI names: metrics
  // (daemon_cdi.cpp).
  void report_cdi();
  std::set<std::string> cdi_errors_logged_;
  // systemd cgroup driver: make the scope's DeviceAllow= include what was granted, so the
  // next daemon-reload keeps it.
  DeviceCheck check_devices(const Watched& w) const;
  SystemdClient* systemd();
  void persist_in_systemd(Watched& w);
  // eBPF probe
  void load_probe();
  void on_probe();
  void on_rule_write(const RuleWriteEvent& ev);
  void on_rule_write_result(const RuleWriteResultEvent& ev);
  void on_device_program_load(const DeviceProgramLoadEvent& ev);
  void sweep_device_programs();
  // Attaches or detaches the probe's syscall hook per probe.syscall_hook; `drift`: some GPU
  // container is missing devices now.
  void maintain_syscall_hook(bool drift);
  void on_denied_open(const DeniedOpenEvent& ev);
  // Adds what the probe counted in the kernel (denied opens of non-GPU paths) to metrics.
  void collect_other_denied_opens();
  void on_cgroup_lifecycle(const CgroupLifecycleEvent& ev);
  void on_device_program(const DeviceProgramEvent& ev);
  bool v2() const { return node_ && node_->version() == CgroupVersion::kV2; }
  void watch_in_probe(Watched& w);
  Watched* container_by_cgroup_id(std::uint64_t id);
  void log_grants(Watched& w);
  void schedule_repair_log_summary(Watched& w, Clock::time_point at);
  void log_repair_summary(Watched& w);
  // Kubernetes Events on the container's pod (daemon_events.cpp); nothing when events are off.
  void start_events();
  void report_event(const Watched& w, kube::Cause cause, const std::vector<WantedDevice>& devices,
                    const std::string& problem = "");
  std::vector<DeviceGrant> apply_grants(Watched& w, const std::vector<WantedDevice>& grantable, std::string& method);
  void arm_or_log(EventSource& timer, Clock::duration delay, const std::string& name);

  Config config_;
  std::string config_path_;
  std::unique_ptr<NodeModel> node_;
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

  std::map<int, WatchTarget> watches_;
  std::map<std::string, int> wd_by_path_;  // the watched file or directory → its watch
  std::map<std::string, Watched> containers_;  // by cgroup directory
  bool located_ = false;
  bool locate_error_logged_ = false;
  std::set<std::string> identity_problems_logged_;  // ambiguous names, bundle conflicts: logged once each
  bool ready_ = false;
  bool ready_notified_ = false;  // READY=1 sent

  std::unique_ptr<SystemdClient> systemd_;
  bool systemd_error_logged_ = false;
  std::unique_ptr<Probe> probe_;
  std::string probe_status_ = "off (probe.enabled: false)";
  EventSource probe_source_;
  std::optional<SyscallHookSchedule> hook_schedule_;
  EventSource hook_timer_;
  bool hook_error_logged_ = false;
  // cgroup v2 without the syscall hook: a device program load announces an attach; the
  // GPU containers' programs are re-read a few times after it (kProgramSweep).
  EventSource program_sweep_timer_;
  std::size_t program_sweep_step_ = 0;
  std::optional<Watched::Revocation> program_loader_;
  std::set<std::uint32_t> probe_majors_;
  std::set<std::string> probe_paths_;
  EventSource other_denied_opens_timer_;
  std::map<std::uint64_t, std::string> dir_by_cgroup_id_;
  // The hierarchy id cgroup_mkdir reports for the tree we watch (cgroup2 is 0).
  std::optional<std::uint32_t> tree_hierarchy_id_;
  EventSource program_query_timer_;

  std::optional<NvmlQuery> nvml_query_;
  EventSource nvml_io_;
  EventSource nvml_deadline_;
  Clock::time_point nvml_next_attempt_{};
  Clock::time_point nvml_started_{};  // of the query under way or the last one
  std::unique_ptr<kube::EventReporter> events_;  // last: its worker stops first
};

int run_daemon(const std::string& config_path);

}  // namespace gdw
