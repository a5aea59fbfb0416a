#include "service/repair_report.h"

#include <algorithm>
#include <cstdio>

#include "log/log.h"
#include "service/arm_timer.h"

namespace gdw {
namespace {

// How long a repair's log line waits for the probe's record of the revoking write.
constexpr Clock::duration kAttributionWait = std::chrono::milliseconds(20);

// "N more repairs in the last X s not logged ...": what a rate-limited repair log line adds.
std::string unlogged_repairs_text(std::uint64_t repairs, Clock::duration over) {
  char text[160];
  std::snprintf(text, sizeof text, "%llu more repair%s in the last %.1fs not logged (repair.log_burst, repair.log_interval)",
                static_cast<unsigned long long>(repairs), repairs == 1 ? "" : "s",
                std::chrono::duration<double>(over).count());
  return text;
}

std::string rate_limit_text(const Config& config) {
  return "repairs rate-limited to " + std::to_string(config.repair.max_per_minute) + "/min after a burst of " +
         std::to_string(config.repair.burst);
}

}  // namespace

void RepairReport::plan(WatchedContainer& w, const RepairStep& step) {
  const RepairPlan& plan = step.plan;
  if (plan.report_unthrottled) log::info("repairs no longer rate-limited", w.log_fields());
  if (plan.report_observed) {
    log::warn("missing " + device_names(step.observed->missing) + " (observe mode: not repairing)", w.log_fields());
    event(w, kube::Cause::kObserveMode, step.observed->missing);
  }
  if (!plan.throttled) return;
  metrics_.throttled(w.labels);
  if (plan.report_throttled) {
    log::warn("devices revoked again and again: " + rate_limit_text(config_), w.log_fields());
    event(w, kube::Cause::kThrottled, plan.held, rate_limit_text(config_) + " (repair.max_per_minute, repair.burst)");
  }
}

void RepairReport::grants(WatchedContainer& w, RepairStep& step, Clock::time_point trigger,
                          Clock::time_point granted_at) {
  const GrantReport& applied = *step.applied;
  const auto repair_time = granted_at - trigger;
  metrics_.repair_duration(std::chrono::duration<double>(repair_time).count());
  const auto granted = std::count_if(applied.devices.begin(), applied.devices.end(),
                                     [](const DeviceOutcome& o) { return o.outcome.ok(); });
  const auto refused = applied.devices.size() - static_cast<std::size_t>(granted);
  if (granted) metrics_.regrant(true, applied.method, static_cast<std::size_t>(granted));
  if (refused) metrics_.regrant(false, applied.method, refused);
  if (applied.programs_replaced) metrics_.programs_replaced(applied.programs_replaced);
  if (applied.programs_loaded) metrics_.programs_loaded(applied.programs_loaded, /*ahead=*/false);
  if (applied.stale_swaps) metrics_.stale_swaps(applied.stale_swaps);
  for (const auto& warning : applied.warnings) log::warn(warning, w.log_fields());
  SettledGrants& settled = step.settled;
  refusals(w, settled);
  if (settled.granted.empty()) return;
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

void RepairReport::refusals(WatchedContainer& w, const SettledGrants& settled) {
  for (const auto& [device, error] : settled.report_refused) {
    log::Fields f = w.log_fields();
    f.device = device.name;
    const std::string rule = format_device_rule(grant_rules({device})[0]);
    f.rule = rule;
    log::error("cannot grant " + device.name + ": " + error.message + "; retrying every " +
                   format_duration(config_.repair.rejected_backoff),
               f);
    event(w, kube::Cause::kGrantRefused, {device}, error.message);
  }
}

void RepairReport::persisted(const WatchedContainer& w, const std::vector<WantedDevice>& devices,
                             const std::string& unit, const Status& outcome) {
  if (!outcome) {
    log::warn("systemd did not add DeviceAllow= to " + unit + ": " + outcome.error().message, w.log_fields());
    return;
  }
  log::info("systemd now allows " + device_names(devices) + " in " + unit + " (kept across daemon-reload)",
            w.log_fields());
}

void RepairReport::named(WatchedContainer& w) {
  if (!w.unlogged.grants.empty()) log_grants(w);
}

void RepairReport::wait_for_attribution(WatchedContainer& w) {
  if (!w.log_timer) {
    const std::string key = w.cgroup.cgroup_dir;
    auto t = loop_.add_timer([this, key] {
      if (WatchedContainer* c = containers_.find(key)) log_grants(*c);
    }, "grant-log");
    if (!t) {
      log_grants(w);
      return;
    }
    w.log_timer = std::move(*t);
  }
  if (!w.log_timer.armed()) arm_timer(w.log_timer, kAttributionWait, "grant-log", daemon_metrics_);
}

void RepairReport::log_grants(WatchedContainer& w) {
  if (w.unlogged.grants.empty()) return;
  w.log_timer.disarm();
  // Every repair is reported (the event reporter has its own per-pod budget); its log line
  // only within repair.log_burst / repair.log_interval, formatted only when written.
  event(w, kube::Cause::kRevoked, w.unlogged.grants);
  const auto line = w.log_limit.on_repair(Clock::now());
  if (!line.log) {
    if (line.summary_at) schedule_summary(w, *line.summary_at);
    w.unlogged.grants.clear();
    w.unlogged.trigger = {};
    return;
  }
  log::Fields f = w.log_fields();
  const std::string names = device_names(w.unlogged.grants), rules = grant_rules_text(w.unlogged.grants);
  f.device = names;
  f.rule = rules;
  std::string message = "granted back " + names;
  std::string writer;
  if (w.last_revocation && names_repair(*w.last_revocation, w.unlogged.trigger)) {
    writer = w.last_revocation->writer;
    f.writer = writer;
    message += "; revoked by " + describe(*w.last_revocation);
  }
  if (line.unlogged > 0) message += "; " + unlogged_repairs_text(line.unlogged, line.since_last_line);
  log::info(message, f);
  w.unlogged.grants.clear();
  w.unlogged.trigger = {};
}

void RepairReport::schedule_summary(WatchedContainer& w, Clock::time_point at) {
  if (!w.log_summary_timer) {
    const std::string key = w.cgroup.cgroup_dir;
    auto t = loop_.add_timer([this, key] {
      if (WatchedContainer* c = containers_.find(key)) log_summary(*c);
    }, "repair-log-summary");
    if (!t) return;  // add_timer logged it; the count goes out with the next line instead
    w.log_summary_timer = std::move(*t);
  }
  const auto delay = std::max(at - Clock::now(), Clock::duration::zero());
  arm_timer(w.log_summary_timer, delay + std::chrono::microseconds(1), "repair-log-summary", daemon_metrics_);
}

void RepairReport::log_summary(WatchedContainer& w) {
  const auto summary = w.log_limit.take_summary(Clock::now());
  if (!summary) return;  // a later line already carried the count
  log::Fields f = w.log_fields();
  std::string message = "devices granted back again: " + unlogged_repairs_text(summary->unlogged, summary->since_last_line);
  if (w.last_revocation) {
    f.writer = w.last_revocation->writer;
    message += "; last revoked by " + describe(*w.last_revocation);
  }
  log::info(message, f);
}

// Kubernetes Events on the container's pod, from what is known of it here (kube/ does the
// rest, off the loop); nothing when Events are off.
void RepairReport::event(const WatchedContainer& w, kube::Cause cause, const std::vector<WantedDevice>& devices,
                         const std::string& problem) {
  if (!events_ || !w.target.identity) return;
  kube::IncidentFacts f;
  // The UID from the kernel-enforced cgroup path; namespace and name as the runtime set them.
  f.pod = {w.target.identity->pod_namespace, w.target.identity->pod_name, w.cgroup.pod.pod_uid};
  f.container = w.target.identity->container_name;
  for (const auto& d : devices) f.devices.push_back(d.name);
  // Who revoked, when the probe saw the write that this repair (or this loss) answers.
  const auto at = cause == kube::Cause::kRevoked ? w.unlogged.trigger : Clock::now();
  if (w.last_revocation && names_repair(*w.last_revocation, at)) {
    f.writer = w.last_revocation->writer;
    f.writer_detail = describe(*w.last_revocation);
  }
  f.repair_time = std::chrono::duration_cast<std::chrono::nanoseconds>(w.unlogged.repair_time);
  f.problem = problem;
  events_->report(cause, f);
}

}  // namespace gdw
