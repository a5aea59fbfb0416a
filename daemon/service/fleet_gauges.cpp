#include "service/fleet_gauges.h"

#include "log/log.h"

namespace gdw {

void FleetGauges::report(const GaugeCounts& g, const NodeModel& node, bool policy_in_programs) {
  // Pods between their cgroup's creation and their sandbox's (or being torn down): normal and
  // brief, so not a warning; `check` lists them.
  if (!node.merged().unused_pod_resources_unnamed.empty())
    log::debug("PodResources entries not used while " + std::to_string(node.merged().unnamed_pods.size()) +
               " pod(s) on the node have no known name");
  metrics_.set_containers_watched(g.watched);
  metrics_.set_containers_missing_devices(g.missing);
  metrics_.set_containers_unidentified(g.unidentified);
  metrics_.set_containers_throttled(g.throttled);
  metrics_.set_ambiguous_pod_identities(node.merged().ambiguous.size());
  metrics_.set_identity_conflicts(g.identity_conflicts);
  report_cdi(node, g.unresolved_cdi);
  for (const auto& text : identity_problems_.still(g.identity_problems)) log::warn("identity not used: " + text);
  if (!policy_in_programs) return;
  for (ProgramOwner owner : kProgramOwners) {
    auto n = g.programs.find(owner);
    metrics_.set_device_programs(to_string(owner), n == g.programs.end() ? 0 : n->second);
  }
}

// CDI spec files that do not parse (a warning naming the file, once while the problem
// lasts) and CDI names of running GPU containers that no spec defines.
void FleetGauges::report_cdi(const NodeModel& node, std::size_t unresolved_names) {
  const std::vector<std::string>& errors = node.cdi_errors();
  std::set<std::string> now(errors.begin(), errors.end());
  for (const auto& e : now)
    if (!cdi_errors_logged_.count(e)) log::warn("CDI spec not used: " + e);
  cdi_errors_logged_ = std::move(now);
  metrics_.set_cdi_spec_errors(errors.size());
  metrics_.set_cdi_unresolved_devices(unresolved_names);
}

}  // namespace gdw
