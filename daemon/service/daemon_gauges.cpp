// The daemon's gauges (containers watched, missing, unidentified, throttled; identity
// problems; device programs), refreshed after every turn that changed anything, and the
// identity problems' log lines (once each while they last).
#include "log/log.h"
#include "service/daemon.h"

namespace gdw {
namespace {

// Long enough to cover a node-wide re-apply storm's batches, short against a scrape.
constexpr auto kGaugeDelay = std::chrono::milliseconds(10);

}  // namespace

void Daemon::gauges_changed() {
  if (!gauge_timer_) {
    update_gauges();
    return;
  }
  if (!gauge_timer_.armed()) arm_or_log(gauge_timer_, kGaugeDelay, "gauges");
}

void Daemon::update_gauges() {
  std::size_t watched = 0, missing = 0, unidentified = 0, throttled = 0, conflicts = 0;
  std::map<ProgramOwner, std::size_t> programs;
  std::set<std::string> identity_problems;
  for (const auto& a : node_->merged().ambiguous) identity_problems.insert(describe(a));
  // Pods between their cgroup's creation and their sandbox's (or being torn down): normal and
  // brief, so not a warning; `check` lists them.
  if (!node_->merged().unused_pod_resources_unnamed.empty())
    log::debug("PodResources entries not used while " + std::to_string(node_->merged().unnamed_pods.size()) +
               " pod(s) on the node have no known name");
  for (const auto& [dir, w] : containers_) {
    if (w.target.identity_conflict) {
      ++conflicts;
      identity_problems.insert(w.target.problem);
    }
    if (w.is_gpu()) {
      for (const auto& [owner, n] : w.programs) programs[owner] += n;
      ++watched;
      missing += !w.repair.missing.empty();
      throttled += w.repair.throttled;
    } else if (w.target.kind == TargetKind::kUnidentified && node_->allocations().pod_has_devices(w.cgroup.pod.pod_uid)) {
      ++unidentified;
    }
  }
  metrics_.set_containers_watched(watched);
  metrics_.set_containers_missing_devices(missing);
  metrics_.set_containers_unidentified(unidentified);
  metrics_.set_containers_throttled(throttled);
  metrics_.set_ambiguous_pod_identities(node_->merged().ambiguous.size());
  metrics_.set_identity_conflicts(conflicts);
  report_cdi();
  for (const auto& text : identity_problems_.still(identity_problems)) log::warn("identity not used: " + text);
  maintain_syscall_hook(missing > 0);
  if (access_ && access_->policy_in_programs()) {
    for (ProgramOwner owner : {ProgramOwner::kOurs, ProgramOwner::kSystemd, ProgramOwner::kRuntime})
      metrics_.set_device_programs(to_string(owner), programs[owner]);
  }
}

}  // namespace gdw
