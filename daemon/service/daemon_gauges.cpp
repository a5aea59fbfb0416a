// The daemon's gauges (containers watched, missing, unidentified, throttled; identity
// problems; device programs), refreshed kGaugeDelay after a turn that changed anything, and the
// identity problems' log lines (once each while they last).
#include "log/log.h"
#include "service/arm_timer.h"
#include "service/daemon.h"
#include "service/gauges.h"

namespace gdw {
namespace {

// Long enough to cover a node-wide re-apply storm's batches, short against a scrape.
constexpr auto kGaugeDelay = std::chrono::milliseconds(10);

// For the node conditions and the readiness gate (kube/conditions.h): the containers that
// do not hold their devices now, and the node faults.
kube::DeviceAccessState device_access_state(const ContainerTable& table, const AllocationIndex& allocations,
                                            const NodeHealthMonitor* health) {
  kube::DeviceAccessState s;
  for (const auto& [dir, w] : table) {
    const bool missing = w.is_gpu() && !w.repair.missing.empty();
    const bool unidentified =
        w.target.kind == TargetKind::kUnidentified && allocations.pod_has_devices(w.cgroup.pod.pod_uid);
    if (!missing && !unidentified) continue;
    s.problems.push_back({dir, {w.labels.pod_namespace, w.labels.pod, w.cgroup.pod.pod_uid}, w.labels.container,
                          missing ? kube::ContainerProblem::Kind::kMissingDevices
                                  : kube::ContainerProblem::Kind::kUnidentified});
  }
  if (health) {
    s.checkpoint_stale = health->checkpoint_stale();
    s.unresponsive_plugins = health->unresponsive_plugins();
  }
  return s;
}

}  // namespace

void Daemon::gauges_changed() {
  if (!gauge_timer_) {
    update_gauges();
    return;
  }
  if (!gauge_timer_.armed()) arm_timer(gauge_timer_, kGaugeDelay, "gauges", metrics_);
}

void Daemon::update_gauges() {
  // Pods between their cgroup's creation and their sandbox's (or being torn down): normal and
  // brief, so not a warning; `check` lists them.
  if (!node_->merged().unused_pod_resources_unnamed.empty())
    log::debug("PodResources entries not used while " + std::to_string(node_->merged().unnamed_pods.size()) +
               " pod(s) on the node have no known name");
  const GaugeCounts g = count_gauges(containers_, node_->merged(), node_->allocations());
  metrics_.set_containers_watched(g.watched);
  metrics_.set_containers_missing_devices(g.missing);
  metrics_.set_containers_unidentified(g.unidentified);
  metrics_.set_containers_throttled(g.throttled);
  metrics_.set_ambiguous_pod_identities(node_->merged().ambiguous.size());
  metrics_.set_identity_conflicts(g.identity_conflicts);
  report_cdi(g.unresolved_cdi);
  for (const auto& text : identity_problems_.still(g.identity_problems)) log::warn("identity not used: " + text);
  probe_->maintain_syscall_hook(g.missing > 0);
  if (access_ && access_->policy_in_programs()) {
    for (ProgramOwner owner : {ProgramOwner::kOurs, ProgramOwner::kSystemd, ProgramOwner::kRuntime}) {
      auto n = g.programs.find(owner);
      metrics_.set_device_programs(to_string(owner), n == g.programs.end() ? 0 : n->second);
    }
  }
  if (kube_) kube_->device_access(device_access_state(containers_, node_->allocations(), health_.get()));
}

}  // namespace gdw
