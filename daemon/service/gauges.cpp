#include "service/gauges.h"

namespace gdw {

GaugeCounts count_gauges(const ContainerTable& table, const MergedAllocations& merged,
                         const AllocationIndex& allocations) {
  GaugeCounts g;
  for (const auto& a : merged.ambiguous) g.identity_problems.insert(describe(a));
  for (const auto& [dir, w] : table) {
    if (w.target.identity_conflict) {
      ++g.identity_conflicts;
      g.identity_problems.insert(w.target.problem);
    }
    if (w.is_gpu()) {
      for (const auto& [owner, n] : w.programs) g.programs[owner] += n;
      ++g.watched;
      g.missing += !w.repair.missing.empty();
      if (!w.repair.missing.empty())
        g.problems.push_back({dir, {w.labels.pod_namespace, w.labels.pod, w.cgroup.pod.pod_uid}, w.labels.container,
                              kube::ContainerProblem::Kind::kMissingDevices});
      g.throttled += w.repair.throttled;
      g.unresolved_cdi += w.target.desired.unresolved_cdi.size();
    } else if (w.target.kind == TargetKind::kUnidentified && allocations.pod_has_devices(w.cgroup.pod.pod_uid)) {
      ++g.unidentified;
      g.problems.push_back({dir, {w.labels.pod_namespace, w.labels.pod, w.cgroup.pod.pod_uid}, w.labels.container,
                            kube::ContainerProblem::Kind::kUnidentified});
    }
  }
  return g;
}

}  // namespace gdw
