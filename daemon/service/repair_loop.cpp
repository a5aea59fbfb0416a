#include "service/repair_loop.h"

#include <algorithm>

#include "log/log.h"

namespace gdw {
namespace {

std::string rate_limit_text(const Config& config) {
  return "repairs rate-limited to " + std::to_string(config.repair.max_per_minute) + "/min after a burst of " +
         std::to_string(config.repair.burst);
}

void count_programs(WatchedContainer& w, const std::vector<AttachedDeviceProgram>& programs) {
  w.programs.clear();
  for (const auto& p : programs) ++w.programs[p.owner];
}

}  // namespace

RepairLoop::RepairLoop(const Config& config, const RepairSettings& settings, EventLoop& loop,
                       ContainerTable& containers, Metrics& metrics, Attribution& attribution, Hooks hooks)
    : config_(config),
      settings_(settings),
      loop_(loop),
      containers_(containers),
      metrics_(metrics),
      attribution_(attribution),
      hooks_(std::move(hooks)) {}

bool RepairLoop::check(DeviceAccess& access, WatchedContainer& w, Clock::time_point trigger, const Revocation* cause) {
  const auto now = Clock::now();
  if (held_back(w.repair, w.retry_armed_at(), now)) return true;
  const bool persistable = persistence_ && persist_in_scope(w.target);
  const bool all_denied_seen = w.all_denied_since_last_check();
  w.last_check = now;
  RepairStep step =
      repair_once(access, w.repair, w.cgroup.cgroup_dir, w.target.desired, persistable, now, settings_, all_denied_seen);
  if (step.gone) {
    hooks_.gone(w.cgroup.cgroup_dir);  // removed mid-repair: quietly dropped
    return false;
  }
  if (!step.observed) {
    metrics_.event_loop_error(access.observed_source());
    if (step.report_read_error) log::error(step.observed.error().message, w.log_fields());
    return true;
  }
  count_programs(w, step.observed->programs);
  for (const auto& d : step.plan.drifted) metrics_.drift(w.labels, d.name);
  attribution_.explain_drift(w, step.plan.drifted, trigger, cause);
  report_plan(w, step, trigger);
  if (step.applied) report_grants(w, step, trigger);
  hooks_.checked(w);
  return true;
}

void RepairLoop::report_plan(WatchedContainer& w, const RepairStep& step, Clock::time_point trigger) {
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
  if (plan.retry_at) hooks_.retry(w, *plan.retry_at - Clock::now(), trigger);
}

void RepairLoop::report_grants(WatchedContainer& w, RepairStep& step, Clock::time_point trigger) {
  const GrantReport& applied = *step.applied;
  const auto repair_time = Clock::now() - trigger;
  metrics_.repair_duration(std::chrono::duration<double>(repair_time).count());
  const auto granted = std::count_if(applied.devices.begin(), applied.devices.end(),
                                     [](const DeviceOutcome& o) { return o.outcome.ok(); });
  const auto refused = applied.devices.size() - static_cast<std::size_t>(granted);
  if (granted) metrics_.regrant(true, applied.method, static_cast<std::size_t>(granted));
  if (refused) metrics_.regrant(false, applied.method, refused);
  if (applied.programs_replaced) metrics_.programs_replaced(applied.programs_replaced);
  if (applied.programs_now) count_programs(w, *applied.programs_now);
  for (const auto& warning : applied.warnings) log::warn(warning, w.log_fields());
  SettledGrants& settled = step.settled;
  if (settled.retry_at) hooks_.retry(w, *settled.retry_at - Clock::now(), trigger);
  report_refusals(w, settled);
  if (settled.granted.empty()) return;
  if (!settled.persist.empty()) persist(w, settled.persist);
  // An earlier repair still waiting for its attribution has its own cause (or none).
  if (!w.unlogged.grants.empty() && w.unlogged.trigger != trigger) log_grants(w);
  if (w.unlogged.grants.empty())
    w.unlogged.grants = std::move(settled.granted);  // the step ends here: no copy
  else
    w.unlogged.grants.insert(w.unlogged.grants.end(), settled.granted.begin(), settled.granted.end());
  if (w.unlogged.trigger == Clock::time_point{}) {
    w.unlogged.trigger = trigger;
    w.unlogged.repair_time = repair_time;
  }
  // The probe's record of the revoking write can trail the inotify event by microseconds:
  // give it a moment so the log line can say who did it.
  if (!probe_loaded_ || (w.last_revocation && names_repair(*w.last_revocation, trigger))) {
    log_grants(w);
    return;
  }
  wait_for_attribution(w);
}

void RepairLoop::report_refusals(WatchedContainer& w, const SettledGrants& settled) {
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
}

void RepairLoop::persist(WatchedContainer& w, const std::vector<WantedDevice>& devices) {
  // The direct grant already restored access (microseconds); asking systemd first would
  // leave the container without its GPU for a D-Bus round trip, or for the whole reload
  // systemd may be busy with. Persisting afterwards makes the next reload keep the grant.
  const std::string dir = w.cgroup.cgroup_dir;
  auto started = persistence_->persist(dir, devices, [this, dir, devices](const std::string& unit, Status outcome) {
    persist_answered(dir, devices, unit, outcome);
  });
  if (!started) {
    log::warn(started.error().message, w.log_fields());
    return;
  }
  if (*started) persist_started(w.repair, Clock::now(), settings_);
}

void RepairLoop::persist_answered(const std::string& dir, const std::vector<WantedDevice>& devices,
                                  const std::string& unit, const Status& outcome) {
  WatchedContainer* c = containers_.find(dir);
  if (!c) return;
  gdw::persist_answered(c->repair, devices, outcome.ok(), Clock::now(), settings_);
  metrics_.regrant(outcome.ok(), "systemd");
  if (!outcome) {
    log::warn("systemd did not add DeviceAllow= to " + unit + ": " + outcome.error().message, c->log_fields());
    return;
  }
  log::info("systemd now allows " + device_names(devices) + " in " + unit + " (kept across daemon-reload)",
            c->log_fields());
  // Its DeviceAllow= changed (exposure), and the kernel state systemd left is verified:
  // anything still missing is granted directly.
  hooks_.persisted(*c);
}

void RepairLoop::revocation_named(WatchedContainer& w) {
  if (!w.unlogged.grants.empty()) log_grants(w);
}
}  // namespace gdw
