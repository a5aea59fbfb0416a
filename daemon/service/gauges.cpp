#include "service/gauges.h"

namespace gdw {

GaugeShare gauge_share(const WatchedContainer& w, const AllocationIndex& allocations) {
  GaugeShare s;
  s.counted = true;
  if (w.target.identity_conflict) {
    s.identity_conflict = true;
    s.identity_problem = w.target.problem;
  }
  if (w.is_gpu()) {
    s.gpu = true;
    for (ProgramOwner owner : kProgramOwners)
      s.programs[static_cast<std::size_t>(owner)] = static_cast<std::uint32_t>(w.programs[owner]);
    s.missing = !w.repair.missing.empty();
    s.throttled = w.repair.throttled;
    s.unresolved_cdi = static_cast<std::uint32_t>(w.target.desired.unresolved_cdi.size());
  } else if (w.target.kind == TargetKind::kUnidentified && allocations.pod_has_devices(w.cgroup.pod.pod_uid)) {
    s.unidentified = true;
  }
  return s;
}

namespace {

kube::ContainerProblem problem_of(const WatchedContainer& w, const GaugeShare& s) {
  return {w.cgroup.cgroup_dir, {w.labels.pod_namespace, w.labels.pod, w.cgroup.pod.pod_uid}, w.labels.container,
          s.missing ? kube::ContainerProblem::Kind::kMissingDevices : kube::ContainerProblem::Kind::kUnidentified};
}

}  // namespace

void GaugeTally::add(const WatchedContainer& w, const GaugeShare& s) {
  sum_.watched += s.gpu;
  sum_.missing += s.missing;
  sum_.throttled += s.throttled;
  sum_.unidentified += s.unidentified;
  sum_.identity_conflicts += s.identity_conflict;
  sum_.unresolved_cdi += s.unresolved_cdi;
  for (std::size_t owner = 0; owner < s.programs.size(); ++owner)
    if (s.programs[owner] > 0) sum_.programs[static_cast<ProgramOwner>(owner)] += s.programs[owner];
  if (s.identity_conflict) ++identity_problems_[s.identity_problem];
  if (s.problem()) problems_.insert_or_assign(w.cgroup.cgroup_dir, problem_of(w, s));
}

void GaugeTally::subtract(const WatchedContainer& w, const GaugeShare& s) {
  sum_.watched -= s.gpu;
  sum_.missing -= s.missing;
  sum_.throttled -= s.throttled;
  sum_.unidentified -= s.unidentified;
  sum_.identity_conflicts -= s.identity_conflict;
  sum_.unresolved_cdi -= s.unresolved_cdi;
  for (std::size_t owner = 0; owner < s.programs.size(); ++owner) {
    if (s.programs[owner] == 0) continue;
    const auto key = static_cast<ProgramOwner>(owner);
    if ((sum_.programs[key] -= s.programs[owner]) == 0) sum_.programs.erase(key);
  }
  if (s.identity_conflict) {
    auto it = identity_problems_.find(s.identity_problem);
    if (it != identity_problems_.end() && --it->second == 0) identity_problems_.erase(it);
  }
  if (s.problem()) problems_.erase(w.cgroup.cgroup_dir);
}

void GaugeTally::rebuild(ContainerTable& table, const AllocationIndex& allocations) {
  *this = GaugeTally{};
  for (auto& [dir, w] : table) {
    w.gauge_share = gauge_share(w, allocations);
    add(w, w.gauge_share);
  }
}

void GaugeTally::update(WatchedContainer& w, const AllocationIndex& allocations) {
  remove(w);
  w.gauge_share = gauge_share(w, allocations);
  add(w, w.gauge_share);
}

void GaugeTally::remove(WatchedContainer& w) {
  if (w.gauge_share.counted) subtract(w, w.gauge_share);
  w.gauge_share = GaugeShare{};
}

GaugeCounts GaugeTally::counts(const MergedAllocations& merged) const {
  GaugeCounts g = sum_;
  for (const auto& a : merged.ambiguous) g.identity_problems.insert(describe(a));
  for (const auto& [text, n] : identity_problems_) g.identity_problems.insert(text);
  g.problems.reserve(problems_.size());
  for (const auto& [dir, p] : problems_) g.problems.push_back(p);
  return g;
}

GaugeCounts count_gauges(const ContainerTable& table, const MergedAllocations& merged,
                         const AllocationIndex& allocations) {
  GaugeTally tally;
  for (const auto& [dir, w] : table) tally.add(w, gauge_share(w, allocations));
  return tally.counts(merged);
}

}  // namespace gdw
