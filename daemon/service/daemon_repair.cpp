// The daemon's repair loop for one container: observe → plan → apply (repair_step.h, the
// same code `check --repair` runs) → report (metrics, log lines, Events, retry timers) and
// persist the grant in systemd's scope (systemd cgroup driver).
#include <algorithm>

#include "log/log.h"
#include "service/daemon.h"

namespace gdw {
namespace {

std::string rate_limit_text(const Config& config) {
  return "repairs rate-limited to " + std::to_string(config.repair.max_per_minute) + "/min after a burst of " +
         std::to_string(config.repair.burst);
}

}  // namespace

void Daemon::check_and_repair(Watched& w, Clock::time_point trigger, const Revocation* cause) {
  const auto now = Clock::now();
  if (held_back(w.repair, w.retry_armed_at(), now)) return;
  const bool persistable = persist_in_scope(w.target);
  RepairStep step = repair_once(*access_, w.repair, w.cgroup.cgroup_dir, w.target.desired, persistable, now,
                                repair_settings_);
  if (step.gone) {
    remove_container(w.cgroup.cgroup_dir);  // removed mid-repair: quietly dropped
    return;
  }
  if (!step.observed) {
    metrics_.event_loop_error(access_->observed_source());
    if (step.report_read_error) log::error(step.observed.error().message, w.log_fields());
    return;
  }
  report_observation(w, step, trigger, cause);
  report_plan(w, step, trigger);
  if (step.applied) report_grants(w, step, trigger);
  watch_restoring_writes(w);
}

void Daemon::watch_restoring_writes(Watched& w) {
  const bool wanted = !w.repair.missing.empty();
  if (wanted == !w.restoring_wds.empty()) return;
  for (int wd : w.restoring_wds) watches_->drop(wd);
  w.restoring_wds.clear();
  if (!wanted) return;
  for (const auto& file : access_->restoring_rule_files()) {
    int wd = watches_->add(w.cgroup.cgroup_dir + "/" + file, IN_MODIFY, {WatchTarget::kContainerFile, w.cgroup.cgroup_dir});
    if (wd >= 0) w.restoring_wds.push_back(wd);
  }
}

void Daemon::report_observation(Watched& w, const RepairStep& step, Clock::time_point trigger,
                                const Revocation* cause) {
  w.programs.clear();
  for (const auto& p : step.observed->programs) ++w.programs[p.owner];
  for (const auto& d : step.plan.drifted) metrics_.drift(w.labels, d.name);
  // A container revoked before it was known as a GPU container: the write kept for it
  // names this, its first repair, when it explains what is missing.
  std::optional<Revocation> adopted;
  if (!w.pending_revocations.empty()) {
    if (!cause && !step.plan.drifted.empty())
      adopted = w.pending_revocations.take_explaining(step.plan.drifted, Clock::now());
    w.pending_revocations.clear();
    if (adopted) cause = &*adopted;
  }
  if (cause && !step.plan.drifted.empty()) {
    w.last_revocation = *cause;
    w.last_revocation->cause_of = trigger;
    metrics_.revocation(cause->writer);
  }
}

void Daemon::report_plan(Watched& w, const RepairStep& step, Clock::time_point trigger) {
  const RepairPlan& plan = step.plan;
  if (plan.report_unthrottled) log::info("repairs no longer rate-limited", w.log_fields());
  if (plan.report_observed) {
    log::warn("missing " + device_names(step.observed->missing) + " (observe mode: not repairing)", w.log_fields());
    report_event(w, kube::Cause::kObserveMode, step.observed->missing);
  }
  if (plan.throttled) {
    metrics_.throttled(w.labels);
    if (plan.report_throttled) {
      log::warn("devices revoked again and again: " + rate_limit_text(config_), w.log_fields());
      report_event(w, kube::Cause::kThrottled, plan.held, rate_limit_text(config_) + " (repair.max_per_minute, repair.burst)");
    }
  }
  if (plan.retry_at) schedule_retry(w, *plan.retry_at - Clock::now(), trigger);
}

void Daemon::report_grants(Watched& w, const RepairStep& step, Clock::time_point trigger) {
  const GrantReport& applied = *step.applied;
  const auto repair_time = Clock::now() - trigger;
  metrics_.repair_duration(std::chrono::duration<double>(repair_time).count());
  const auto granted = std::count_if(applied.devices.begin(), applied.devices.end(),
                                     [](const DeviceOutcome& o) { return o.outcome.ok(); });
  const auto refused = applied.devices.size() - static_cast<std::size_t>(granted);
  if (granted) metrics_.regrant(true, applied.method, static_cast<std::size_t>(granted));
  if (refused) metrics_.regrant(false, applied.method, refused);
  if (applied.programs_replaced) metrics_.programs_replaced(applied.programs_replaced);
  if (applied.programs_now) {
    w.programs.clear();
    for (const auto& p : *applied.programs_now) ++w.programs[p.owner];
  }
  for (const auto& warning : applied.warnings) log::warn(warning, w.log_fields());
  const SettledGrants& settled = step.settled;
  if (settled.retry_at) schedule_retry(w, *settled.retry_at - Clock::now(), trigger);
  for (const auto& [device, error] : settled.report_refused) {
    log::Fields f = w.log_fields();
    f.device = device.name;
    const std::string rule = format_device_rule(grant_rules({device})[0]);
    f.rule = rule;
    log::error("cannot grant " + device.name + ": " + error.message + "; retrying every " +
                   format_duration(config_.repair.rejected_backoff),
               f);
    report_event(w, kube::Cause::kGrantRefused, {device}, error.message);
  }
  if (settled.granted.empty()) return;
  if (!settled.persist.empty()) persist_in_systemd(w, settled.persist);
  // An earlier repair still waiting for its attribution has its own cause (or none).
  if (!w.unlogged.grants.empty() && w.unlogged.trigger != trigger) log_grants(w);
  w.unlogged.grants.insert(w.unlogged.grants.end(), settled.granted.begin(), settled.granted.end());
  if (w.unlogged.trigger == Clock::time_point{}) {
    w.unlogged.trigger = trigger;
    w.unlogged.repair_time = repair_time;
  }
  // The probe's record of the revoking write can trail the inotify event by microseconds:
  // give it a moment so the log line can say who did it.
  if (!probe_ || (w.last_revocation && names_repair(*w.last_revocation, trigger))) {
    log_grants(w);
    return;
  }
  wait_for_attribution(w);
}

SystemdClient* Daemon::systemd() {
  if (systemd_) return systemd_.get();
  auto client = SystemdClient::connect(config_.systemd.bus_address, loop_->native(), config_.systemd.timeout);
  if (!client) {
    if (systemd_error_.first())
      log::warn("cannot reach systemd (systemd.bus_address): " + client.error().message +
                "; grants are direct only and a daemon-reload will revoke them again");
    return nullptr;
  }
  systemd_error_.reset();
  systemd_ = std::move(*client);
  // A reload re-applies every scope's device policy (v1: deny `a` and its list; v2: a new
  // ANDed program): look at every GPU container once it has finished.
  (void)systemd_->on_reloading([this](bool active) {
    if (active) return;
    check_gpu_containers();
    update_gauges();
  });
  return systemd_.get();
}

void Daemon::persist_in_systemd(Watched& w, const std::vector<WantedDevice>& devices) {
  // The direct grant already restored access (microseconds); asking systemd first would
  // leave the container without its GPU for a D-Bus round trip, or for the whole reload
  // systemd may be busy with. Persisting afterwards makes the next reload keep the grant.
  const std::string unit = scope_unit_of(w.cgroup.cgroup_dir);
  if (unit.empty()) return;
  SystemdClient* client = systemd();
  if (!client) return;
  const std::string dir = w.cgroup.cgroup_dir;
  auto started = client->add_device_allow(unit, devices, [this, dir, devices, unit](Status outcome) {
    Watched* c = containers_.find(dir);
    if (!c) return;
    persist_answered(c->repair, devices, outcome.ok(), Clock::now(), repair_settings_);
    metrics_.regrant(outcome.ok(), "systemd");
    if (!outcome) {
      log::warn("systemd did not add DeviceAllow= to " + unit + ": " + outcome.error().message, c->log_fields());
      return;
    }
    log::info("systemd now allows " + device_names(devices) + " in " + unit + " (kept across daemon-reload)",
              c->log_fields());
    resolve(*c, /*force=*/true);  // its DeviceAllow= changed: exposure (node/exposure.h)
    // Verify the kernel state systemd left; anything still missing is granted directly.
    check_and_repair(*c, Clock::now());
    gauges_changed();
  });
  if (!started) {
    log::warn("cannot ask systemd to allow devices in " + unit + ": " + started.error().message, w.log_fields());
    return;
  }
  persist_started(w.repair, Clock::now(), repair_settings_);
}

}  // namespace gdw
