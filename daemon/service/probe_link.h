// The daemon's link to the eBPF probe (probe/probe.h): loading it, and on SIGHUP unloading
// it or taking its new settings; telling it which cgroups and device nodes to watch;
// attaching its syscall hook while wanted (core/syscall_hook_schedule.h); and reading its
// records. Rule writes and device program changes go to attribution (who revoked), denied
// opens to metrics and the log; what the container fleet must act on comes back from
// drain() as a ProbeBatch. The probe calls nobody: its owner (service/container_fleet.h)
// reads it when its descriptor is readable and acts on the batch.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <unordered_map>
#include <vector>

#include "core/config.h"
#include "core/log_once.h"
#include "core/revocation.h"
#include "core/syscall_hook_schedule.h"
#include "metrics/daemon_metrics.h"
#include "metrics/probe_metrics.h"
#include "probe/probe.h"
#include "service/attribution.h"
#include "service/container_table.h"
#include "watch/event_loop.h"

namespace gdw {

// What one read of the probe asks of the container fleet. Containers are named by cgroup
// id: acting on one entry may remove a container another entry names.
struct ProbeBatch {
  // The probe named who revoked these containers' devices: a repair log line waiting for
  // it can go out.
  std::vector<std::uint64_t> named;
  // Who wrote a container's rules or changed its programs, in this read: a runtime among
  // them is waited for before any check of this read grants (a record of systemd's checked
  // first must not grant inside the apply of a runc whose record follows).
  struct Writer {
    std::uint64_t cgroup_id;
    ProcessInfo process;
  };
  std::vector<Writer> writers;
  // A device program attach/detach by someone else on a GPU container (cgroup v2): check
  // it now, naming whoever made `change` if devices are found newly missing (its
  // target_cgroup_id is the container's, also for a change on crun's sub-cgroup of it).
  struct ProgramChange {
    std::uint64_t cgroup_id;
    DeviceProgramEvent change;
    bool on_subgroup = false;  // made on crun's sub-cgroup of the container
  };
  std::vector<ProgramChange> program_changes;
  // A device program was loaded by someone else (cgroup v2, without the syscall hook):
  // an attach is likely to follow.
  bool program_loaded = false;
  // With the attach hook, per device program load by a process inside a container: the
  // tenant's own re-apply, whose attach follows once the verifier is done. The container
  // is looked at meanwhile, so that the repair after the attach runs warm.
  struct LoadInside {
    std::uint64_t cgroup_id;  // the container's
    int cpu;                  // the loader's, as it loaded
  };
  std::vector<LoadInside> loaded_inside;
  // cgroup_mkdir: a faster trigger than inotify for new containers.
  struct CreatedCgroup {
    std::uint32_t hierarchy_id;
    std::string path;  // relative to that hierarchy's root
    ProcessInfo caller;
  };
  std::vector<CreatedCgroup> created;
  // Writers awaited (await_writer_exit) whose every thread is in do_exit: their applies ended.
  std::vector<pid_t> writers_exited;
  bool empty() const {
    return named.empty() && writers.empty() && program_changes.empty() && !program_loaded && loaded_inside.empty() &&
           created.empty() && writers_exited.empty();
  }
};

class ProbeLink {
 public:
  // The priority its reader has on the loop: the lowest (inotify is -10, timers 0). sd-event
  // dispatches one source per turn and a read takes at most one budget of records, so a
  // repair that becomes due while records keep coming waits for at most that many, however
  // fast a tenant makes them. So that a repair still names its writer, an inotify event's
  // handler drains one budget first (the revoking write's record precedes its event).
  static constexpr int kReadPriority = 10;

  ProbeLink(const Config& config, EventLoop& loop, ContainerTable& containers, Metrics& metrics,
            Attribution& attribution);

  // Loads, unloads or re-reads the settings per config.probe (at start and on SIGHUP).
  // The probe's descriptor (fd()) may change: its reader is set up again by the caller.
  void apply_config();
  bool loaded() const { return probe_ != nullptr; }
  // The ring buffer's descriptor, readable while records wait; -1 when not loaded.
  int fd() const { return probe_ ? probe_->fd() : -1; }
  const std::string& status() const { return status_; }

  // Reads the records waiting (at most one budget: the rest in a later turn).
  // `policy_in_programs`: the node's device policy is in device programs (cgroup v2), where
  // program loads and attaches can revoke.
  ProbeBatch drain(bool policy_in_programs);
  // The delays of the trigger records drain() read, into their histogram: called by the
  // owner once it has acted on the batch (a histogram's lock and buckets are not on the
  // reaction's path).
  void report_record_delays();
  // A check waits for writer `pid` to exit: the probe reports it (ProbeBatch::writers_exited)
  // before its pidfd can. Without a probe, or on failure, the pidfd alone tells.
  void await_writer_exit(pid_t pid);
  // A GPU container: its cgroup and its devices' nodes are watched from now on.
  void watch(const WatchedContainer& w);
  void unwatch(const WatchedContainer& w);
  // Attaches or detaches the syscall hook per probe.syscall_hook; `drift`: some GPU
  // container is missing devices now. A linger is looked at again by the link itself.
  void maintain_syscall_hook(bool drift);
  // What the node's device policy is made of, once located (and for a probe loaded later):
  // only the always-on hooks that policy needs stay attached (Probe::focus).
  void set_policy_form(DevicePolicyForm form);

 private:
  void load();
  void unload();
  // probe.syscall_hook and its linger, as configured now, for the hook's schedule.
  void take_hook_settings();
  // Focuses the probe on policy_form_, says in the log what it sees by, sets the gauges.
  void focus();
  Result<EventSource> start_counters_timer();
  void on_record(const ProbeEvent& ev, bool policy_in_programs, ProbeBatch& batch);
  void on_denied_open(const DeniedOpenEvent& ev);
  // A repair trigger's record (rule write, program change) read now: its delay is noted
  // for report_record_delays().
  void record_read(std::uint64_t ktime_ns);
  static void note_writer(ProbeBatch& batch, std::uint64_t cgroup_id, const ProcessInfo& writer);
  // The container whose cgroup (or crun's sub-cgroup of it) is `cgroup_id`; nullptr if none.
  WatchedContainer* container_of_cgroup(std::uint64_t cgroup_id);
  // Adds what the probe counted in the kernel (denied opens of non-GPU paths) to metrics.
  void collect_other_denied_opens();

  const Config& config_;
  EventLoop& loop_;
  ContainerTable& containers_;
  ProbeMetrics metrics_;
  DaemonMetrics daemon_metrics_;
  Attribution& attribution_;

  std::unique_ptr<Probe> probe_;
  DevicePolicyForm policy_form_ = DevicePolicyForm::kUnknown;
  std::string status_ = "off (probe.enabled: false)";
  std::optional<SyscallHookSchedule> hook_schedule_;
  EventSource hook_timer_;
  bool last_drift_ = false;  // as last reported: the linger's timer decides again with it
  LogOnce hook_error_;
  std::unordered_map<std::uint64_t, std::uint64_t> subgroup_owner_;  // crun sub-cgroup id → container's
  std::set<std::uint32_t> majors_;
  std::set<std::string> paths_;
  EventSource counters_timer_;
  bool hook_attached_since_collect_ = false;  // the hook counted opens since the last collection
  std::vector<double> unreported_delays_s_;     // record_read() → report_record_delays()
};

}  // namespace gdw
