// The container fleet: the one place that answers "which containers are there and what do
// they need". It owns the container table and each container's life cycle (appear, resolve
// who it is and what it must have, watch, check, retry, go), the triggers that concern
// containers (the kubepods tree and rule files on its own inotify queue, the eBPF probe's
// records, systemd's reloads, the device program query timer) and the parts a check runs
// through: the repair loop (observe → plan → apply → report), attribution, and systemd
// persistence under the systemd cgroup driver.
//
// Its parts return what happened (RepairLoop::check → CheckOutcome, ProbeLink::drain →
// ProbeBatch, ContainerWatches::read → ContainerEvents) and the fleet acts on it. Only
// systemd's answers arrive later, on the loop.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "backend/device_access.h"
#include "core/config.h"
#include "core/repair_plan.h"
#include "kube/kube_reporting.h"
#include "metrics/daemon_metrics.h"
#include "metrics/node_metrics.h"
#include "metrics/repair_metrics.h"
#include "node/node_model.h"
#include "service/apply_waits.h"
#include "service/attribution.h"
#include "service/container_table.h"
#include "service/container_watches.h"
#include "service/fleet_gauges.h"
#include "service/gauges.h"
#include "service/node_health_monitor.h"
#include "service/probe_link.h"
#include "service/repair_loop.h"
#include "service/systemd_persistence.h"
#include "watch/event_loop.h"

namespace gdw {

class ContainerFleet final : public ContainerLister {
 public:
  ContainerFleet(const Config& config, RepairSettings settings, EventLoop& loop, Metrics& metrics, NodeModel& node);
  ~ContainerFleet() override;
  ContainerFleet(const ContainerFleet&) = delete;
  ContainerFleet& operator=(const ContainerFleet&) = delete;

  // Its inotify queue, the eBPF probe (per config.probe), systemd, its timers.
  Status start();
  // The node's device policy, once the kubepods tree is located: containers are watched
  // and checked from then on.
  void set_access(std::unique_ptr<DeviceAccess> access);
  bool has_access() const { return access_ != nullptr; }
  void set_reporting(kube::KubeReporting* kube);
  // SIGHUP with the node's inputs unchanged: the probe takes its new settings.
  void apply_probe_config();

  // A full resync's part: every directory of `tree` watched, its containers added or
  // re-resolved, those gone dropped, every GPU container checked, the gauges counted.
  void sync(const KubepodsTree& tree);
  // An input of resolve() changed (allocations, inventory): containers whose wants changed
  // are checked.
  void reresolve_all();
  // A runtime state directory gained `container_id`: an unidentified container of that id
  // is looked at again shortly.
  void bundle_appeared(const std::string& container_id);
  void check_gpu_containers();
  void update_gauges();

  std::vector<RunningContainer> running_containers() const override;
  std::size_t gpu_containers() const;
  const std::string& probe_status() const { return probe_.status(); }

 private:
  Status start_timers();
  void read_probe_on_loop();
  void on_container_events();
  void on_probe_records();
  void act(ProbeBatch batch);
  // Device program loads inside GPU containers: each container looked at now, so that the
  // repair after its attach runs warm; unless the loop runs on the loader's CPU (`loop_cpu`),
  // or looked ahead less than kLookAheadInterval ago. True: what the gauges count moved.
  bool look_ahead(const std::vector<ProbeBatch::LoadInside>& loads, int loop_cpu);
  void upsert(const DiscoveredContainer& cg, bool check_new);
  void remove(const std::string& cgroup_dir);
  // Re-resolves who the container is and what it must have, unless nothing it depends on
  // changed since (NodeModel::generation()); what DeviceAllow= lacks is persisted.
  void resolve(WatchedContainer& w, bool force);
  void apply_target(WatchedContainer& w, ContainerTarget target);
  void start_watching(WatchedContainer& w);
  void stop_watching(WatchedContainer& w);
  // One check of `w` and what its outcome asks for, unless it waits for a runtime's apply
  // to end (ApplyWaits; then it is made when the wait ends). `write_event`: it answers a
  // rule write or program change. true: what the gauges count moved, or the container went.
  bool check(WatchedContainer& w, Clock::time_point trigger, const CheckCause& cause = {}, bool write_event = false);
  // After a check that granted, or followed a create's end: `w` read again and persisted;
  // true when what the gauges count moved.
  bool reread_after_grant(WatchedContainer& w, Clock::time_point trigger);
  bool check_ids(Clock::time_point trigger, const std::vector<std::uint64_t>& cgroup_ids);
  bool check_dirs(Clock::time_point trigger, const std::vector<std::string>& dirs, bool write_event = false);
  // What the wait of a check of `w` goes by: the revoking writer the probe named since its
  // last check, if one whose exit is waited for.
  ApplyWaits::Request apply_wait_request(const WatchedContainer& w, Clock::time_point trigger, const CheckCause& cause,
                                         bool write_event) const;
  // Whether the check of `w` must wait for a runtime's apply to end (and the probe is told
  // whose exit ends it).
  bool must_wait(WatchedContainer& w, Clock::time_point trigger, const CheckCause& cause, bool write_event);
  // Whether a runtime may still be applying to `w`: its create has not ended, or a wait
  // holds a writer or keeps a check. Nothing of the daemon's is written then.
  bool in_runtime_apply(const WatchedContainer& w) const;
  // While a check waits: DeviceAccess::prepare_grant for the program its cause attached.
  void prepare_grant(const WatchedContainer& w, const CheckCause& cause);
  // The wrappers prepare_grant() had loaded off the loop, taken in and counted (as loaded
  // ahead of the repairs: gpu_devwatch_device_programs_loaded_total{when="ahead"}).
  void count_prepared_loads();
  // The probe saw these awaited writers exit: the checks that waited for them, now.
  void writers_exited(const std::vector<pid_t>& pids);
  // A wait's timer or writer's pidfd: the probe's waiting records are read first (see .cpp).
  // By value: the wait's source, whose callback passes `dir`, may be let go meanwhile.
  void on_apply_wait_due(std::string dir);
  // A wait for `dir` may have ended: the check it held, now.
  void check_held(const std::string& dir);
  // `process` made the cgroup of `w` or crun's sub-cgroup of it, or wrote or attached to
  // it: if a runtime, held for (ApplyWaits::hold). hold_for_makers(): for what the probe's
  // read in hand (makers_) says made them.
  void hold_for_runtime(WatchedContainer& w, const ProcessInfo& process);
  // A wait of `w` holds running `writer`: the probe awaits its exit, which ends the wait,
  // and the create's pid file is no longer watched.
  void follow_writer(WatchedContainer& w, pid_t writer);
  void hold_for_makers(WatchedContainer& w);
  void schedule_retry(WatchedContainer& w, Clock::duration delay, Clock::time_point trigger);
  void on_retry(const std::string& dir);
  // systemd driver: adds to the scope's DeviceAllow= what it lacks (or, its unit files
  // unread, what was `granted`), so that systemd's own re-apply keeps the devices.
  void persist(WatchedContainer& w, const std::vector<WantedDevice>& granted = {});
  void on_persisted(const std::string& dir, const std::vector<WantedDevice>& devices, const std::string& unit,
                    const Status& outcome);
  // A cgroup made under the tree; `maker`: who made it, when the probe said.
  void dir_created(const std::string& path, const ProcessInfo* maker = nullptr);
  void tree_dir_removed(const std::string& path);
  void sweep_programs();
  // The gauges are counted once, shortly after a burst that changed what they count:
  // gauges_changed() after anything that may have changed many containers' shares (all are
  // read again then), gauges_moved() after checks, which name the containers they moved.
  void gauges_changed();
  void gauges_moved();
  void count_moved_gauges();
  void report_gauges(GaugeCounts counts);

  const Config& config_;
  const RepairSettings settings_;  // the repair loop refers to it
  EventLoop& loop_;
  NodeMetrics node_metrics_;
  DaemonMetrics daemon_metrics_;
  RepairMetrics repair_metrics_;  // the wrappers loaded and the looks made ahead of repairs
  NodeModel& node_;
  ContainerTable containers_;
  ContainerWatches watches_;
  Attribution attribution_;
  ProbeLink probe_;
  RepairLoop repair_;
  SystemdPersistence persistence_;
  ApplyWaits apply_waits_;
  FleetGauges gauges_;
  GaugeTally gauge_tally_;
  bool gauge_tally_whole_ = false;  // false: every share is read again at the next count
  std::unordered_set<std::string> gauge_shares_moved_;  // containers whose share a check moved (dirs)
  // Kubernetes Events, node conditions and the readiness gate, when on (the daemon's):
  // repairs are reported there, and after each gauge count which containers miss devices.
  kube::KubeReporting* kube_ = nullptr;
  std::unique_ptr<DeviceAccess> access_;  // the node's device policy (v1 or v2), once located
  // The hierarchy id cgroup_mkdir reports for the tree (cgroup2 is 0).
  std::optional<std::uint32_t> tree_hierarchy_id_;
  bool synced_ = false;  // after the first sync, a new GPU container is checked at once
  // While act() handles a read's new cgroups: who made each (by absolute path).
  std::unordered_map<std::string, ProcessInfo> makers_;
  double newest_container_start_ = 0;

  EventSource watches_source_;
  EventSource probe_source_;
  EventSource gauge_timer_;
  EventSource program_query_timer_;
  // Device programs without the syscall hook: a load announces an attach; the GPU
  // containers' programs are looked at a few times after it (kProgramSweep).
  EventSource program_sweep_timer_;
  std::size_t program_sweep_step_ = 0;
  std::optional<Clock::time_point> last_look_ahead_;
  // After a grant, the access prepares the next one (CheckOutcome::prepare_next_grant) a
  // moment later: a tenant sharing the daemon's CPU gets its devices back first.
  EventSource prepare_timer_;
  std::size_t prepared_loads_counted_ = 0;  // DeviceAccess::adopt_prepared() when last counted
};

}  // namespace gdw
