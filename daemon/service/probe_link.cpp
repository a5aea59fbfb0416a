#include "service/probe_link.h"

#include <sys/epoll.h>
#include <sys/stat.h>

#include <algorithm>
#include <type_traits>
#include <variant>

#include "log/log.h"
#include "runtime/cgroup_names.h"
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
// How often the kernel's counts of denied non-GPU opens are added to the metric.
constexpr Clock::duration kOtherDeniedOpensInterval = std::chrono::seconds(1);
}  // namespace

ProbeLink::ProbeLink(const Config& config, EventLoop& loop, ContainerTable& containers, Metrics& metrics,
                     Attribution& attribution)
    : config_(config),
      loop_(loop),
      containers_(containers),
      metrics_(metrics),
      daemon_metrics_(metrics),
      attribution_(attribution) {}

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
  metrics_.set_attach_hook_attached(probe_ ? probe_->attach_hook_kind() : std::nullopt);
  metrics_.set_capability_hook_attached(probe_ && probe_->capability_hook());
  metrics_.set_write_path_hook_attached(probe_ && probe_->write_path_hook());
}

void ProbeLink::set_policy_form(DevicePolicyForm form) {
  if (form == policy_form_) return;
  policy_form_ = form;
  if (probe_) focus();
}

void ProbeLink::focus() {
  if (auto s = probe_->focus(policy_form_); !s) log::error("probe: " + s.error().message);
  metrics_.set_attach_hook_attached(probe_->attach_hook_kind());
  metrics_.set_capability_hook_attached(probe_->capability_hook());
  metrics_.set_write_path_hook_attached(probe_->write_path_hook());
  // Rule writers on a cgroup v1 node seen by no always-on hook: named only while the
  // syscall hook is attached.
  const bool degraded = policy_form_ == DevicePolicyForm::kRuleFiles && probe_->rule_writes_need_syscall_hook();
  metrics_.set_rule_writers_degraded(degraded);
  if (policy_form_ == DevicePolicyForm::kUnknown) return;  // as loaded: both, said at load
  const bool programs = policy_form_ == DevicePolicyForm::kPrograms;
  std::string seen_by;
  const AttachHookChoice hook = probe_->attach_hook_choice();
  if (programs && probe_->attach_hook()) {
    // Which kind, and why each cheaper one was refused.
    seen_by = "attach hook " + hook.describe() + ": device program attaches to GPU containers are seen " +
              (hook.chosen == AttachHookKind::kLsm
                   ? "at their bpf() call, and looked at again 1 ms to 1 s after"
                   : "as the kernel installs them") +
              (probe_->program_loads_ahead() ? "; a device program load wakes the loop ahead of its attach" : "") +
              "; capability hook off";
  } else if (programs && !probe_->capability_hook()) {
    seen_by = "no attach hook (" + hook.describe() +
              "): device program changes seen only while the syscall hook is attached, else by the periodic query";
  } else if (programs) {
    seen_by = "attach hook " + hook.describe() +
              ": a device program load makes every GPU container's programs be read again (capability hook)";
  } else if (probe_->capability_hook()) {
    seen_by = "rule writers named at the kernel's permission check (capability hook); attach hook off";
  } else if (probe_->write_path_hook()) {
    seen_by = "rule writers named on the devices controller's write path (fexit/devcgroup_access_write; no "
              "cap_capable tracepoint before 6.14); attach hook off";
  } else {
    seen_by = "rule writers named only while the syscall hook is attached (a GPU container missing devices), not "
              "for the write that revoked: attribution degraded (no cap_capable tracepoint before 6.14; write path "
              "hook: " + probe_->write_path_hook_refusal() + ")";
  }
  const std::string line = std::string("eBPF probe on a cgroup ") + (programs ? "v2" : "v1") + " node: " + seen_by;
  if (degraded)
    log::warn(line);
  else
    log::info(line);
}

void ProbeLink::unload() {
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
  options.attach_hook = config_.probe.attach_hook;
  auto probe = Probe::load(options);
  if (!probe) {
    status_ = "off: " + probe.error().message;
    log::warn("eBPF probe not loaded, continuing on inotify alone: " + probe.error().message);
    return;
  }
  probe_ = std::move(*probe);
  majors_.clear();
  paths_.clear();
  subgroup_owner_.clear();
  // The kernel-side counters (a map lookup per CPU each): read now and then, not per record.
  if (auto counts = start_counters_timer())
    counters_timer_ = std::move(*counts);
  else
    log::warn("denied opens of non-GPU paths are not counted: " + counts.error().message);
  take_hook_settings();
  hook_error_.reset();
  // What it sees changes by is said once the node's cgroup version is known (focus()).
  log::info("eBPF probe loaded; syscall hook (denied opens) " + to_string(config_.probe.syscall_hook));
  if (!config_.probe.attach_hook) {
    log::info("eBPF probe: attach hook off (probe.attach_hook: false); on cgroup v2 a device program load makes "
              "every GPU container's programs be read again");
  } else if (!probe_->attach_hook()) {
    log::warn("eBPF probe: no attach hook (" + probe_->attach_hook_choice().describe() +
              "); on cgroup v2 a device program load makes every GPU container's programs be read again");
  }
  focus();
  maintain_syscall_hook(false);
}

void ProbeLink::take_hook_settings() {
  hook_schedule_.emplace(config_.probe.syscall_hook, config_.probe.syscall_hook_linger,
                         config_.mode == Mode::kObserve);
  status_ = "loaded, syscall hook " + to_string(config_.probe.syscall_hook);
}

Result<EventSource> ProbeLink::start_counters_timer() {
  return loop_.add_timer([this] {
    collect_other_denied_opens();
    if (probe_) metrics_.set_ring_buffer_drops(probe_->stats().ring_buffer_drops);
    arm_timer(counters_timer_, kOtherDeniedOpensInterval, "other-denied-opens", daemon_metrics_);
  }, "other-denied-opens", std::chrono::duration_cast<std::chrono::microseconds>(kOtherDeniedOpensInterval),
                         kReadPriority);
}

void ProbeLink::maintain_syscall_hook(bool drift) {
  last_drift_ = drift;
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
    auto t = loop_.add_timer([this] { maintain_syscall_hook(last_drift_); }, "syscall-hook");
    if (!t) {
      log::error("cannot create the syscall-hook timer: " + t.error().message);
      return;
    }
    hook_timer_ = std::move(*t);
  }
  const auto delay = *decision.recheck_at > now ? *decision.recheck_at - now : Clock::duration::zero();
  arm_timer(hook_timer_, delay + std::chrono::microseconds(1), "syscall-hook", daemon_metrics_);
}

void ProbeLink::watch(const WatchedContainer& w) {
  if (!probe_) return;
  if (w.cgroup_id) {
    if (auto s = probe_->watch_cgroup(w.cgroup_id); !s) log::warn("probe: " + s.error().message);
    if (auto s = probe_->watch_program_cgroup(w.cgroup_id); !s) log::warn("probe: " + s.error().message);
    // crun (systemd driver, v2) puts the processes and its program in a sub-cgroup.
    struct stat st{};
    const std::string sub = w.cgroup.cgroup_dir + "/" + kCrunSubgroup;
    if (::stat(sub.c_str(), &st) == 0 && S_ISDIR(st.st_mode) && subgroup_owner_.emplace(st.st_ino, w.cgroup_id).second) {
      if (auto s = probe_->watch_program_cgroup(st.st_ino); !s) log::warn("probe: " + s.error().message);
    }
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
  if (!probe_ || !w.cgroup_id) return;
  (void)probe_->unwatch_cgroup(w.cgroup_id);
  (void)probe_->unwatch_program_cgroup(w.cgroup_id);
  std::erase_if(subgroup_owner_, [&](const auto& kv) {
    if (kv.second != w.cgroup_id) return false;
    (void)probe_->unwatch_program_cgroup(kv.first);
    return true;
  });
}

ProbeBatch ProbeLink::drain(bool policy_in_programs) {
  ProbeBatch batch;
  if (!probe_) return batch;
  // At most kProbeRecordsPerTurn: the rest keeps the fd readable for a later turn.
  auto n = probe_->consume([&](const ProbeEvent& ev) { on_record(ev, policy_in_programs, batch); },
                           kProbeRecordsPerTurn);
  if (!n) {
    daemon_metrics_.event_loop_error("probe");
    log::error("reading probe events: " + n.error().message);
  }
  return batch;
}

void ProbeLink::on_record(const ProbeEvent& ev, bool policy_in_programs, ProbeBatch& batch) {
  std::visit(
      [&](const auto& e) {
        using T = std::decay_t<decltype(e)>;
        if constexpr (std::is_same_v<T, RuleWriteEvent>) {
          record_read(e.ktime_ns);
          WatchedContainer* named = attribution_.rule_write(e);  // the container of target_cgroup_id
          if (named) batch.named.push_back(named->cgroup_id);
          if (WatchedContainer* w = named ? named : containers_.by_cgroup_id(e.target_cgroup_id))
            note_writer(batch, w->cgroup_id, e.writer);
        } else if constexpr (std::is_same_v<T, RuleWriteResultEvent>) {
          attribution_.rule_write_result(e);
        } else if constexpr (std::is_same_v<T, DeviceProgramLoadEvent>) {
          // With the attach hook or the syscall hook attached the attach itself is
          // reported (below): the load woke the loop ahead of it, and a load inside a
          // container has that container looked at meanwhile.
          if (!policy_in_programs) return;
          if (!probe_->attach_hook() && !probe_->syscall_hook_attached()) {
            if (attribution_.program_load(e)) batch.program_loaded = true;
          } else if (WatchedContainer* w = container_of_cgroup(e.caller.cgroup_id)) {
            batch.loaded_inside.push_back({w->cgroup_id, e.caller.cpu});  // one per load: each counted
          }
        } else if constexpr (std::is_same_v<T, DeniedOpenEvent>) {
          on_denied_open(e);
        } else if constexpr (std::is_same_v<T, CgroupLifecycleEvent>) {
          if (e.created) batch.created.push_back({e.hierarchy_id, e.path, e.caller});
        } else if constexpr (std::is_same_v<T, WriterExitEvent>) {
          batch.writers_exited.push_back(e.pid);
        } else if constexpr (std::is_same_v<T, DeviceProgramEvent>) {
          if (!policy_in_programs) return;
          record_read(e.ktime_ns);
          // A change on crun's sub-cgroup is a change of its container.
          DeviceProgramEvent on_container = e;
          const auto owner = subgroup_owner_.find(e.target_cgroup_id);
          const bool on_subgroup = owner != subgroup_owner_.end();
          if (on_subgroup) on_container.target_cgroup_id = owner->second;
          WatchedContainer* w = attribution_.program_change(on_container);
          if (!w) return;
          // Seen at the bpf() call's start (lsm/bpf): the look it leads to may come before
          // the attach is installed, so the GPU containers are looked at again 1 ms to 1 s
          // later, as after a program load, naming the attacher.
          if (e.ahead_of_install &&
              attribution_.program_load(DeviceProgramLoadEvent{e.caller, e.ktime_ns},
                                        "attaching device program " + std::to_string(e.prog_id),
                                        /*read_exe=*/false))  // not on the reaction's path
            batch.program_loaded = true;
          note_writer(batch, w->cgroup_id, e.caller);
          batch.program_changes.push_back({w->cgroup_id, std::move(on_container), on_subgroup});
        }
      },
      ev);
}

WatchedContainer* ProbeLink::container_of_cgroup(std::uint64_t cgroup_id) {
  const auto owner = subgroup_owner_.find(cgroup_id);
  return containers_.by_cgroup_id(owner != subgroup_owner_.end() ? owner->second : cgroup_id);
}

void ProbeLink::note_writer(ProbeBatch& batch, std::uint64_t cgroup_id, const ProcessInfo& writer) {
  // A runtime's apply is a run of records by one process: noted once.
  if (!batch.writers.empty() && batch.writers.back().cgroup_id == cgroup_id &&
      batch.writers.back().process.pid == writer.pid)
    return;
  batch.writers.push_back({cgroup_id, writer});
}

void ProbeLink::await_writer_exit(pid_t pid) {
  if (!probe_) return;
  if (auto awaited = probe_->await_writer_exit(pid); !awaited)
    log::debug(awaited.error().message + "; its pidfd tells when it has exited");
}

void ProbeLink::record_read(std::uint64_t ktime_ns) {
  const std::chrono::duration<double> delay = Clock::now() - probe_time(ktime_ns);
  // A drain reads one budget: kept to that, should an owner not report in between.
  if (unreported_delays_s_.size() >= static_cast<std::size_t>(kProbeRecordsPerTurn)) report_record_delays();
  unreported_delays_s_.push_back(std::max(delay.count(), 0.0));
}

void ProbeLink::report_record_delays() {
  for (double delay : unreported_delays_s_) metrics_.record_delay(delay);
  unreported_delays_s_.clear();  // keeps its capacity: no allocation on the next drain
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
