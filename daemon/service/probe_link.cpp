#include "service/probe_link.h"

#include <sys/epoll.h>

#include <type_traits>
#include <variant>

#include "log/log.h"
#include "service/arm_timer.h"

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

}  // namespace

ProbeLink::ProbeLink(const Config& config, EventLoop& loop, ContainerTable& containers, Metrics& metrics,
                     Attribution& attribution, Hooks hooks)
    : config_(config),
      loop_(loop),
      containers_(containers),
      metrics_(metrics),
      attribution_(attribution),
      hooks_(std::move(hooks)) {}

void ProbeLink::apply_config() {
  if (!config_.probe.enabled && probe_) {
    unload();
  } else if (config_.probe.enabled && !probe_) {
    load();
  } else if (probe_) {
    take_hook_settings();  // probe.syscall_hook or its linger may have changed; the next update decides
  }
  metrics_.set_probe_loaded(probe_ != nullptr);
  metrics_.set_syscall_hook_attached(probe_ && probe_->syscall_hook_attached());
}

void ProbeLink::unload() {
  source_ = EventSource();
  counters_timer_ = EventSource();
  probe_.reset();
  hook_schedule_.reset();
  hook_timer_.disarm();
  status_ = "off (probe.enabled: false)";
}

void ProbeLink::load() {
  ProbeOptions options;
  options.ignored_writer_tgid = own_tgid_in_the_kernel();
  options.report_allow_writes = false;  // cannot revoke (attribution would drop them)
  auto probe = Probe::load(options);
  if (!probe) {
    status_ = "off: " + probe.error().message;
    log::warn("eBPF probe not loaded, continuing on inotify alone: " + probe.error().message);
    return;
  }
  auto src = loop_.add_io((*probe)->fd(), EPOLLIN, [this](std::uint32_t) { drain(); }, "probe", kProbePriority);
  if (!src) {
    status_ = "off: " + src.error().message;
    log::warn("eBPF probe not loaded: " + src.error().message);
    return;
  }
  probe_ = std::move(*probe);
  source_ = std::move(*src);
  majors_.clear();
  paths_.clear();
  // The kernel-side counters (a map lookup per CPU each): read now and then, not per record.
  if (auto counts = start_counters_timer())
    counters_timer_ = std::move(*counts);
  else
    log::warn("denied opens of non-GPU paths are not counted: " + counts.error().message);
  take_hook_settings();
  hook_error_.reset();
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

void ProbeLink::take_hook_settings() {
  hook_schedule_.emplace(config_.probe.syscall_hook, config_.probe.syscall_hook_linger,
                         probe_->rule_writes_need_syscall_hook());
  status_ = "loaded, syscall hook " + to_string(config_.probe.syscall_hook);
}

Result<EventSource> ProbeLink::start_counters_timer() {
  return loop_.add_timer([this] {
    collect_other_denied_opens();
    if (probe_) metrics_.set_ring_buffer_drops(probe_->stats().ring_buffer_drops);
    arm_timer(counters_timer_, kOtherDeniedOpensInterval, "other-denied-opens", metrics_);
  }, "other-denied-opens", std::chrono::duration_cast<std::chrono::microseconds>(kOtherDeniedOpensInterval),
                         kProbePriority);
}

void ProbeLink::maintain_syscall_hook(bool drift) {
  if (!probe_ || !hook_schedule_) return;
  const auto now = Clock::now();
  const auto decision = hook_schedule_->update(drift, now);
  // Counted until now, whether it stays attached or not (collect_other_denied_opens).
  hook_attached_since_collect_ |= probe_->syscall_hook_attached();
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
  hook_attached_since_collect_ |= probe_->syscall_hook_attached();
  if (!decision.recheck_at) {
    hook_timer_.disarm();
    return;
  }
  if (!hook_timer_) {
    auto t = loop_.add_timer([this] { hooks_.update_gauges(); }, "syscall-hook");
    if (!t) {
      log::error("cannot create the syscall-hook timer: " + t.error().message);
      return;
    }
    hook_timer_ = std::move(*t);
  }
  const auto delay = *decision.recheck_at > now ? *decision.recheck_at - now : Clock::duration::zero();
  arm_timer(hook_timer_, delay + std::chrono::microseconds(1), "syscall-hook", metrics_);
}

void ProbeLink::watch(const WatchedContainer& w) {
  if (!probe_) return;
  if (w.cgroup_id) {
    if (auto s = probe_->watch_cgroup(w.cgroup_id); !s) log::warn("probe: " + s.error().message);
  }
  for (const auto& d : w.target.desired.wanted) {
    if (majors_.insert(d.dev.major).second) (void)probe_->watch_major(d.dev.major);
    // The node's path inside containers (/dev/<name>) and on this host (dev_root).
    for (const std::string& path : {"/dev/" + d.name, config_.devices.dev_root + "/" + d.name}) {
      if (paths_.insert(path).second) (void)probe_->watch_device_node(path, d.dev.major, d.dev.minor);
    }
  }
}

void ProbeLink::unwatch(const WatchedContainer& w) {
  if (probe_ && w.cgroup_id) (void)probe_->unwatch_cgroup(w.cgroup_id);
}

void ProbeLink::drain() {
  if (!probe_) return;
  // At most kProbeRecordsPerTurn: the rest keeps the fd readable for a later turn.
  auto n = probe_->consume([this](const ProbeEvent& ev) {
    std::visit(
        [this](const auto& e) {
          using T = std::decay_t<decltype(e)>;
          if constexpr (std::is_same_v<T, RuleWriteEvent>) {
            if (WatchedContainer* w = attribution_.rule_write(e)) hooks_.revocation_named(*w);
          } else if constexpr (std::is_same_v<T, RuleWriteResultEvent>) {
            attribution_.rule_write_result(e);
          } else if constexpr (std::is_same_v<T, DeviceProgramLoadEvent>) {
            on_device_program_load(e);
          } else if constexpr (std::is_same_v<T, DeniedOpenEvent>) {
            on_denied_open(e);
          } else if constexpr (std::is_same_v<T, CgroupLifecycleEvent>) {
            // A faster trigger than inotify for new containers (which stays the fallback).
            if (e.created) hooks_.cgroup_created(e.hierarchy_id, e.path);
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

void ProbeLink::on_device_program_load(const DeviceProgramLoadEvent& ev) {
  // With the syscall hook attached the attach itself is reported (on_device_program).
  if (!hooks_.policy_in_programs() || probe_->syscall_hook_attached()) return;
  if (!attribution_.program_load(ev)) return;
  if (!program_sweep_timer_) {
    auto t = loop_.add_timer([this] { sweep_device_programs(); }, "program-sweep");
    if (!t) {
      log::error("cannot create the program-sweep timer: " + t.error().message);
      return;
    }
    program_sweep_timer_ = std::move(*t);
  }
  program_sweep_step_ = 0;
  arm_timer(program_sweep_timer_, kProgramSweep[0], "program-sweep", metrics_);
}

void ProbeLink::sweep_device_programs() {
  if (!hooks_.policy_in_programs()) return;
  const Revocation* cause = attribution_.program_loader(Clock::now());
  for (const auto& dir : containers_.dirs([](const WatchedContainer& w) { return w.is_gpu(); }))
    if (WatchedContainer* w = containers_.find(dir)) hooks_.check(*w, cause);
  hooks_.update_gauges();
  if (++program_sweep_step_ < std::size(kProgramSweep))
    arm_timer(program_sweep_timer_, kProgramSweep[program_sweep_step_] - kProgramSweep[program_sweep_step_ - 1],
              "program-sweep", metrics_);
}

void ProbeLink::on_device_program(const DeviceProgramEvent& ev) {
  if (!hooks_.policy_in_programs()) return;
  auto change = attribution_.program_change(ev);
  if (!change) return;
  // Named only if the change leaves wanted devices denied.
  hooks_.check(*change->first, &change->second);
  hooks_.gauges_changed();
}

void ProbeLink::on_denied_open(const DeniedOpenEvent& ev) {
  WatchedContainer* w = containers_.by_cgroup_id(ev.opener.devices_cgroup_id);
  if (!w) w = containers_.by_cgroup_id(ev.opener.cgroup_id);
  if (!w || !w->is_gpu()) return;
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

void ProbeLink::collect_other_denied_opens() {
  // Only the syscall hook counts opens: with it detached since the last collection there
  // is nothing new, and a map lookup per GPU container on the loop every second is saved.
  if (!probe_ || !(hook_attached_since_collect_ || probe_->syscall_hook_attached())) return;
  hook_attached_since_collect_ = false;
  for (auto& [dir, w] : containers_) {
    if (!w.is_gpu() || !w.cgroup_id) continue;
    auto total = probe_->other_denied_opens(w.cgroup_id);
    if (!total) continue;  // not watched (yet): nothing counted
    // Lower than last time: the cgroup was unwatched and watched again, counting from 0.
    if (*total < w.other_denied_opens_seen) w.other_denied_opens_seen = 0;
    if (*total > w.other_denied_opens_seen) metrics_.denied_open(w.labels, "other", *total - w.other_denied_opens_seen);
    w.other_denied_opens_seen = *total;
  }
}

}  // namespace gdw
