// The daemon's use of the eBPF probe: who revoked (rule writes, v2 program changes), denied
// opens inside GPU containers, and cgroup_mkdir as a faster trigger than inotify.
#include <sys/epoll.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <type_traits>
#include <variant>

#include "core/writer_name.h"
#include "log/log.h"
#include "service/daemon.h"

namespace gdw {
namespace {

// Denied opens of one device in one container are logged at most this often.
constexpr Clock::duration kDeniedOpenLogInterval = std::chrono::minutes(1);
// Probe records handled per turn of the event loop. The probe source has the lowest
// priority, and sd-event dispatches one source per turn: a repair (inotify, retry timers)
// that becomes due while records keep coming waits for at most this many records, however
// fast a tenant makes them (each is decode + O(1) bookkeeping, about a microsecond).
constexpr int kProbeRecordsPerTurn = 64;
// Lowest of the loop's sources (inotify is -10, timers 0): see kProbeRecordsPerTurn. So
// that a repair still names its writer, on_inotify reads one budget of waiting records
// before it repairs (the revoking write's record precedes its inotify event).
constexpr int kProbePriority = 10;
// How often the kernel's counts of denied non-GPU opens are added to the metric.
constexpr Clock::duration kOtherDeniedOpensInterval = std::chrono::seconds(1);
// cgroup v2 without the syscall hook: after a device program load (its attach follows
// from the same process, normally within microseconds), the GPU containers' programs are
// re-read at these delays after the latest load; program_query_interval stays the
// fallback for an attach later than the last one.
constexpr Clock::duration kProgramSweep[] = {std::chrono::milliseconds(1), std::chrono::milliseconds(10),
                                             std::chrono::milliseconds(100), std::chrono::seconds(1)};

// The process behind an event; its executable is read now, while it may still exist.
// Who changed a container's device access, for metrics (a bounded name) and the repair's
// log line (pid, comm, executable, parent, what it did).
struct Actor {
  std::string writer;
  std::string detail;
};

Actor describe_actor(const ProcessInfo& p, const std::string& exe, const std::string& action) {
  const WriterIdentity who{p.comm, p.parent_comm, exe, p.pid};
  Actor a;
  a.writer = recognise_writer(who);
  a.detail = a.writer + " (pid " + std::to_string(p.pid) + ", comm " + p.comm + (who.exe.empty() ? "" : ", " + who.exe) +
             ", parent " + p.parent_comm + ") " + action;
  return a;
}

// Our own grants are rule writes too: the probe leaves them out in the kernel, which knows
// us by our pid in the initial pid namespace (the DaemonSet runs with hostPID). Elsewhere
// getpid() is another number there, so nothing is left out (on_rule_write drops ours).
std::uint32_t own_tgid_in_the_kernel() {
  constexpr ino_t kInitialPidNamespaceInode = 0xEFFFFFFCU;  // PROC_PID_INIT_INO
  struct stat st{};
  if (::stat("/proc/self/ns/pid", &st) != 0 || st.st_ino != kInitialPidNamespaceInode) return 0;
  return static_cast<std::uint32_t>(::getpid());
}

// The probe's timestamps are CLOCK_MONOTONIC, as Clock (steady_clock) is.
Clock::time_point from_ktime(std::uint64_t ktime_ns) {
  return Clock::time_point(std::chrono::duration_cast<Clock::duration>(std::chrono::nanoseconds(ktime_ns)));
}

}  // namespace

void Daemon::load_probe() {
  ProbeOptions options;
  options.ignored_writer_tgid = own_tgid_in_the_kernel();
  options.report_allow_writes = false;  // cannot revoke (on_rule_write would drop them)
  auto probe = Probe::load(options);
  if (!probe) {
    probe_status_ = "off: " + probe.error().message;
    log::warn("eBPF probe not loaded, continuing on inotify alone: " + probe.error().message);
    return;
  }
  auto src = loop_->add_io((*probe)->fd(), EPOLLIN, [this](std::uint32_t) { on_probe(); }, "probe", kProbePriority);
  if (!src) {
    probe_status_ = "off: " + src.error().message;
    log::warn("eBPF probe not loaded: " + src.error().message);
    return;
  }
  probe_ = std::move(*probe);
  probe_source_ = std::move(*src);
  probe_majors_.clear();
  probe_paths_.clear();
  // The kernel-side counters (a map lookup per CPU each): read now and then, not per record.
  auto counts = loop_->add_timer([this] {
    collect_other_denied_opens();
    if (probe_) metrics_.set_ring_buffer_drops(probe_->stats().ring_buffer_drops);
    arm_or_log(other_denied_opens_timer_, kOtherDeniedOpensInterval, "other-denied-opens");
  }, "other-denied-opens", std::chrono::duration_cast<std::chrono::microseconds>(kOtherDeniedOpensInterval),
                               kProbePriority);
  if (counts)
    other_denied_opens_timer_ = std::move(*counts);
  else
    log::warn("denied opens of non-GPU paths are not counted: " + counts.error().message);
  hook_schedule_.emplace(config_.probe.syscall_hook, config_.probe.syscall_hook_linger,
                         probe_->rule_writes_need_syscall_hook());
  hook_error_.reset();
  probe_status_ = "loaded, syscall hook " + to_string(config_.probe.syscall_hook);
  if (probe_->rule_writes_need_syscall_hook()) {
    log::info("eBPF probe loaded; this kernel has no cap_capable tracepoint (< 6.14), so rule writers are named "
              "only while the syscall hook is attached (probe.syscall_hook: " +
              to_string(config_.probe.syscall_hook) + ")");
  } else {
    log::info("eBPF probe loaded: naming rule writers at the kernel's permission check; syscall hook (denied "
              "opens) " + to_string(config_.probe.syscall_hook));
  }
  maintain_syscall_hook(false);
}

void Daemon::maintain_syscall_hook(bool drift) {
  if (!probe_ || !hook_schedule_) return;
  const auto now = Clock::now();
  const auto decision = hook_schedule_->update(drift, now);
  if (decision.attached != probe_->syscall_hook_attached()) {
    if (auto s = probe_->set_syscall_hook(decision.attached); !s) {
      if (hook_error_.first()) log::error("probe: " + s.error().message + "; denied opens are not reported");
    } else {
      hook_error_.reset();
      log::info(std::string("probe syscall hook ") + (decision.attached ? "attached" : "detached") + " (" +
                decision.reason + ")" + (decision.attached ? ": reporting denied opens of GPU nodes" : ""));
    }
  }
  metrics_.set_syscall_hook_attached(probe_->syscall_hook_attached());
  if (!decision.recheck_at) {
    hook_timer_.disarm();
    return;
  }
  if (!hook_timer_) {
    auto t = loop_->add_timer([this] { update_gauges(); }, "syscall-hook");
    if (!t) {
      log::error("cannot create the syscall-hook timer: " + t.error().message);
      return;
    }
    hook_timer_ = std::move(*t);
  }
  const auto delay = *decision.recheck_at > now ? *decision.recheck_at - now : Clock::duration::zero();
  arm_or_log(hook_timer_, delay + std::chrono::microseconds(1), "syscall-hook");
}

void Daemon::watch_in_probe(Watched& w) {
  if (!probe_) return;
  if (w.cgroup_id) {
    if (auto s = probe_->watch_cgroup(w.cgroup_id); !s) log::warn("probe: " + s.error().message);
  }
  for (const auto& d : w.target.desired.wanted) {
    if (probe_majors_.insert(d.dev.major).second) (void)probe_->watch_major(d.dev.major);
    // The node's path inside containers (/dev/<name>) and on this host (dev_root).
    for (const std::string& path : {"/dev/" + d.name, config_.devices.dev_root + "/" + d.name}) {
      if (probe_paths_.insert(path).second) (void)probe_->watch_device_node(path, d.dev.major, d.dev.minor);
    }
  }
}

void Daemon::on_probe() {
  // At most kProbeRecordsPerTurn: the rest keeps the fd readable for a later turn.
  auto n = probe_->consume([this](const ProbeEvent& ev) {
    std::visit(
        [this](const auto& e) {
          using T = std::decay_t<decltype(e)>;
          if constexpr (std::is_same_v<T, RuleWriteEvent>) {
            on_rule_write(e);
          } else if constexpr (std::is_same_v<T, RuleWriteResultEvent>) {
            on_rule_write_result(e);
          } else if constexpr (std::is_same_v<T, DeviceProgramLoadEvent>) {
            on_device_program_load(e);
          } else if constexpr (std::is_same_v<T, DeniedOpenEvent>) {
            on_denied_open(e);
          } else if constexpr (std::is_same_v<T, CgroupLifecycleEvent>) {
            on_cgroup_lifecycle(e);
          } else if constexpr (std::is_same_v<T, DeviceProgramEvent>) {
            on_device_program(e);
          }
        },
        ev);
  }, kProbeRecordsPerTurn);
  if (!n) {
    metrics_.event_loop_error("probe");
    log::error("reading probe events: " + n.error().message);
  }
}

void Daemon::on_rule_write(const RuleWriteEvent& ev) {
  Watched* w = containers_.by_cgroup_id(ev.target_cgroup_id);
  // A write refused at the permission check is known to have failed; one seen before the
  // kernel parsed it is taken at its word (a deny rule that parses is applied, bar a
  // cgroup with children refusing "a"), and its result, when the hook reports it, can
  // still withdraw the attribution.
  if (!w || !ev.deny || (ev.result && *ev.result < 0)) return;
  if (ev.writer.pid == own_pid_) return;
  auto rule = parse_device_rule(ev.rule);
  if (!rule) return;
  // A GPU container: it revokes when it matches a wanted device and takes away some of the
  // access it needs. Any other container may be a GPU container whose allocation record
  // is still on its way: its deny rules are kept (bounded) for its first repair, while it
  // is young (a record is late by seconds, not more; old containers cost nothing here).
  const bool gpu = w->is_gpu();
  if (gpu && !rule_revokes(*rule, w->target.desired.wanted)) return;
  if (!gpu && Clock::now() - w->first_seen > PendingRevocations::kMaxAge) return;
  Actor actor = describe_actor(ev.writer, executables_.of(ev.writer), "writing '" + ev.rule + "' to devices.deny");
  Revocation r;
  r.writer = std::move(actor.writer);
  r.detail = std::move(actor.detail);
  r.at = from_ktime(ev.ktime_ns);
  r.tid = ev.writer.tid;
  r.ktime_ns = ev.ktime_ns;
  r.rule = *rule;
  if (!gpu) {
    w->pending_revocations.add(std::move(r), Clock::now());
    return;
  }
  w->last_revocation = std::move(r);
  metrics_.revocation(w->last_revocation->writer);
  if (!w->unlogged.grants.empty()) log_grants(*w);
}

void Daemon::on_rule_write_result(const RuleWriteResultEvent& ev) {
  if (ev.result >= 0) return;
  Watched* w = containers_.by_cgroup_id(ev.target_cgroup_id);
  if (!w) return;
  if (!w->is_gpu()) {
    w->pending_revocations.withdraw(ev.tid, ev.write_ktime_ns);
    return;
  }
  log::debug("rule write by pid " + std::to_string(ev.pid) + " failed: " + std::strerror(static_cast<int>(-ev.result)),
             w->log_fields());
  // It revoked nothing: a repair must not name it.
  if (w->last_revocation && w->last_revocation->tid == ev.tid && w->last_revocation->ktime_ns == ev.write_ktime_ns)
    w->last_revocation.reset();
}

void Daemon::on_device_program_load(const DeviceProgramLoadEvent& ev) {
  // With the syscall hook attached the attach itself is reported (on_device_program).
  if (!access_ || !access_->policy_in_programs() || ev.caller.pid == own_pid_ || probe_->syscall_hook_attached())
    return;
  Actor actor = describe_actor(ev.caller, executables_.of(ev.caller), "loading a device program");
  Revocation r;
  r.writer = std::move(actor.writer);
  r.detail = std::move(actor.detail);
  r.at = from_ktime(ev.ktime_ns);
  program_loader_ = std::move(r);
  if (!program_sweep_timer_) {
    auto t = loop_->add_timer([this] { sweep_device_programs(); }, "program-sweep");
    if (!t) {
      log::error("cannot create the program-sweep timer: " + t.error().message);
      return;
    }
    program_sweep_timer_ = std::move(*t);
  }
  program_sweep_step_ = 0;
  arm_or_log(program_sweep_timer_, kProgramSweep[0], "program-sweep");
}

void Daemon::sweep_device_programs() {
  if (!access_ || !access_->policy_in_programs()) return;
  const Revocation* cause =
      program_loader_ && explains(program_loader_->at, Clock::now()) ? &*program_loader_ : nullptr;
  for (const auto& dir : containers_.dirs([](const Watched& w) { return w.is_gpu(); }))
    if (Watched* w = containers_.find(dir)) check_and_repair(*w, Clock::now(), cause);
  update_gauges();
  if (++program_sweep_step_ < std::size(kProgramSweep))
    arm_or_log(program_sweep_timer_, kProgramSweep[program_sweep_step_] - kProgramSweep[program_sweep_step_ - 1],
               "program-sweep");
}

void Daemon::on_denied_open(const DeniedOpenEvent& ev) {
  Watched* w = containers_.by_cgroup_id(ev.opener.devices_cgroup_id);
  if (!w) w = containers_.by_cgroup_id(ev.opener.cgroup_id);
  if (!w || w->target.kind != TargetKind::kGpu) return;
  std::string device = "other";
  for (const auto& d : w->target.desired.wanted)
    if (d.dev.major == ev.major && d.dev.minor == ev.minor) device = d.name;
  metrics_.denied_open(w->labels, device);
  const auto now = Clock::now();
  auto& last = w->denied_open_logged[device];
  if (last != Clock::time_point{} && now - last < kDeniedOpenLogInterval) return;
  last = now;
  log::Fields f = w->log_fields();
  f.device = device;
  log::warn("open(" + ev.path + ") of c " + std::to_string(ev.major) + ":" + std::to_string(ev.minor) +
                " denied (EPERM) for pid " + std::to_string(ev.opener.pid) + " (" + ev.opener.comm + ")",
            f);
}

void Daemon::collect_other_denied_opens() {
  if (!probe_) return;
  for (auto& [dir, w] : containers_) {
    if (w.target.kind != TargetKind::kGpu || !w.cgroup_id) continue;
    auto total = probe_->other_denied_opens(w.cgroup_id);
    if (!total) continue;  // not watched (yet): nothing counted
    // Lower than last time: the cgroup was unwatched and watched again, counting from 0.
    if (*total < w.other_denied_opens_seen) w.other_denied_opens_seen = 0;
    if (*total > w.other_denied_opens_seen) metrics_.denied_open(w.labels, "other", *total - w.other_denied_opens_seen);
    w.other_denied_opens_seen = *total;
  }
}

void Daemon::on_device_program(const DeviceProgramEvent& ev) {
  if (!access_ || !access_->policy_in_programs() || ev.caller.pid == own_pid_ || ev.result < 0) return;
  Watched* w = containers_.by_cgroup_id(ev.target_cgroup_id);
  if (!w || w->target.kind != TargetKind::kGpu) return;
  using Command = DeviceProgramEvent::Command;
  const char* what = ev.command == Command::kProgAttach   ? "attaching"
                     : ev.command == Command::kProgDetach ? "detaching"
                     : ev.command == Command::kLinkCreate ? "linking"
                     : ev.command == Command::kLinkUpdate ? "updating the link of"
                                                          : "detaching the link of";
  Actor actor = describe_actor(ev.caller, executables_.of(ev.caller), std::string(what) + " device program " + std::to_string(ev.prog_id));
  Revocation r;
  r.writer = std::move(actor.writer);
  r.detail = std::move(actor.detail);
  r.at = from_ktime(ev.ktime_ns);
  // Named only if the change leaves wanted devices denied.
  check_and_repair(*w, Clock::now(), &r);
  gauges_changed();
}

void Daemon::on_cgroup_lifecycle(const CgroupLifecycleEvent& ev) {
  // A faster trigger than inotify for new containers; inotify stays the fallback and
  // dir_created() is idempotent.
  if (!ev.created || !located_ || tree_hierarchy_id_ != ev.hierarchy_id) return;
  dir_created(node_->kubepods().hierarchy_root + ev.path);
}

}  // namespace gdw
