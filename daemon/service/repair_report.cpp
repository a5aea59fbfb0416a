// Reporting a repair: log lines and Kubernetes Events. A repair's log line waits briefly
// for the probe's record of who revoked (kAttributionWait), then names the writer. In a
// fight loop every repair is still made at once, but the journal gets the first
// repair.log_burst lines of a container and then one line per repair.log_interval that
// counts the others (RepairLogLimit decides; this writes).
#include <cstdio>

#include "log/log.h"
#include "service/arm_timer.h"
#include "service/repair_loop.h"

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

}  // namespace

void RepairLoop::wait_for_attribution(WatchedContainer& w) {
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
  if (!w.log_timer.armed()) arm_timer(w.log_timer, kAttributionWait, "grant-log", metrics_);
}

void RepairLoop::log_grants(WatchedContainer& w) {
  if (w.unlogged.grants.empty()) return;
  w.log_timer.disarm();
  // Every repair is reported (the event reporter has its own per-pod budget); its log line
  // only within repair.log_burst / repair.log_interval, formatted only when written.
  report_event(w, kube::Cause::kRevoked, w.unlogged.grants);
  const auto line = w.log_limit.on_repair(Clock::now());
  if (!line.log) {
    if (line.summary_at) schedule_repair_log_summary(w, *line.summary_at);
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

void RepairLoop::schedule_repair_log_summary(WatchedContainer& w, Clock::time_point at) {
  if (!w.log_summary_timer) {
    const std::string key = w.cgroup.cgroup_dir;
    auto t = loop_.add_timer([this, key] {
      if (WatchedContainer* c = containers_.find(key)) log_repair_summary(*c);
    }, "repair-log-summary");
    if (!t) return;  // add_timer logged it; the count goes out with the next line instead
    w.log_summary_timer = std::move(*t);
  }
  const auto delay = std::max(at - Clock::now(), Clock::duration::zero());
  arm_timer(w.log_summary_timer, delay + std::chrono::microseconds(1), "repair-log-summary", metrics_);
}

void RepairLoop::log_repair_summary(WatchedContainer& w) {
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
void RepairLoop::report_event(const WatchedContainer& w, kube::Cause cause, const std::vector<WantedDevice>& devices,
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
