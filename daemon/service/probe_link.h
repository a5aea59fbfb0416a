// The daemon's link to the eBPF probe (probe/probe.h): loading it, and on SIGHUP unloading
// it or taking its new settings; telling it which cgroups and device nodes to watch;
// attaching its syscall hook while wanted (core/syscall_hook_schedule.h); and handing its
// records on: rule writes and device program changes to attribution (who revoked), denied
// opens to metrics and the log, cgroup_mkdir to the owner as a fast trigger.
//
// What needs the rest of the daemon (checking a container, the gauges, the node's device
// policy kind, the kubepods tree) goes through Hooks.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <set>
#include <string>

#include "core/config.h"
#include "core/log_once.h"
#include "core/syscall_hook_schedule.h"
#include "metrics/metrics.h"
#include "probe/probe.h"
#include "service/attribution.h"
#include "service/container_table.h"
#include "watch/event_loop.h"

namespace gdw {

class ProbeLink {
 public:
  struct Hooks {
    // Check `w` now; `cause` is named if the check finds devices newly missing.
    std::function<void(WatchedContainer& w, const Revocation* cause)> check;
    std::function<void()> update_gauges;   // now
    std::function<void()> gauges_changed;  // soon, once for a burst
    // The node's device policy is in device programs (cgroup v2), where program loads
    // and attaches can revoke.
    std::function<bool()> policy_in_programs;
    // A cgroup was made: `path` relative to the root of hierarchy `hierarchy_id`.
    std::function<void(std::uint32_t hierarchy_id, const std::string& path)> cgroup_created;
    // The probe named who revoked `w`'s devices (a repair log line may wait for it).
    std::function<void(WatchedContainer& w)> revocation_named;
  };

  ProbeLink(const Config& config, EventLoop& loop, ContainerTable& containers, Metrics& metrics,
            Attribution& attribution, Hooks hooks);

  // Loads, unloads or re-reads the settings per config.probe (at start and on SIGHUP).
  void apply_config();
  bool loaded() const { return probe_ != nullptr; }
  const std::string& status() const { return status_; }

  // Handles the records waiting (at most one budget: the rest in a later turn).
  void drain();
  // A GPU container: its cgroup and its devices' nodes are watched from now on.
  void watch(const WatchedContainer& w);
  void unwatch(const WatchedContainer& w);
  // Attaches or detaches the syscall hook per probe.syscall_hook; `drift`: some GPU
  // container is missing devices now.
  void maintain_syscall_hook(bool drift);

 private:
  void load();
  void unload();
  // probe.syscall_hook and its linger, as configured now, for the hook's schedule.
  void take_hook_settings();
  Result<EventSource> start_counters_timer();
  void on_device_program_load(const DeviceProgramLoadEvent& ev);
  void sweep_device_programs();
  void on_device_program(const DeviceProgramEvent& ev);
  void on_denied_open(const DeniedOpenEvent& ev);
  // Adds what the probe counted in the kernel (denied opens of non-GPU paths) to metrics.
  void collect_other_denied_opens();

  const Config& config_;
  EventLoop& loop_;
  ContainerTable& containers_;
  Metrics& metrics_;
  Attribution& attribution_;
  Hooks hooks_;

  std::unique_ptr<Probe> probe_;
  std::string status_ = "off (probe.enabled: false)";
  EventSource source_;
  std::optional<SyscallHookSchedule> hook_schedule_;
  EventSource hook_timer_;
  LogOnce hook_error_;
  // Device programs without the syscall hook: a device program load announces an attach;
  // the GPU containers' programs are re-read a few times after it (kProgramSweep).
  EventSource program_sweep_timer_;
  std::size_t program_sweep_step_ = 0;
  std::set<std::uint32_t> majors_;
  std::set<std::string> paths_;
  EventSource counters_timer_;
  bool hook_attached_since_collect_ = false;  // the hook counted opens since the last collection
};

}  // namespace gdw
