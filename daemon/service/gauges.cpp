#include "service/gauges.h"

namespace gdw {

GaugeShare gauge_share(const std::string& dir, const WatchedContainer& w, const AllocationIndex& allocations) {
  GaugeShare s;
  if (w.target.identity_conflict) {
    s.identity_conflict = true;
    s.identity_problem = w.target.problem;
  }
  auto problem = [&](kube::ContainerProblem::Kind kind) {
    return kube::ContainerProblem{dir, {w.labels.pod_namespace, w.labels.pod, w.cgroup.pod.pod_uid}, w.labels.container,
                                  kind};
  };
  if (w.is_gpu()) {
    s.gpu = true;
    for (const auto& [owner, n] : w.programs)
      if (n > 0) s.programs[owner] = n;
    s.missing = !w.repair.missing.empty();
    s.throttled = w.repair.throttled;
    s.unresolved_cdi = w.target.desired.unresolved_cdi.size();
    if (s.missing) s.problem = problem(kube::ContainerProblem::Kind::kMissingDevices);
  } else if (w.target.kind == TargetKind::kUnidentified && allocations.pod_has_devices(w.cgroup.pod.pod_uid)) {
    s.unidentified = true;
    s.problem = problem(kube::ContainerProblem::Kind::kUnidentified);
  }
  return s;
}

void GaugeTally::add(const std::string& dir, const GaugeShare& s) {
  sum_.watched += s.gpu;
  sum_.missing += s.missing;
  sum_.throttled += s.throttled;
  sum_.unidentified += s.unidentified;
  sum_.identity_conflicts += s.identity_conflict;
  sum_.unresolved_cdi += s.unresolved_cdi;
  for (const auto& [owner, n] : s.programs) sum_.programs[owner] += n;
  if (s.identity_conflict) ++identity_problems_[s.identity_problem];
  if (s.problem) problems_.insert_or_assign(dir, *s.problem);
}

void GaugeTally::subtract(const std::string& dir, const GaugeShare& s) {
  sum_.watched -= s.gpu;
  sum_.missing -= s.missing;
  sum_.throttled -= s.throttled;
  sum_.unidentified -= s.unidentified;
  sum_.identity_conflicts -= s.identity_conflict;
  sum_.unresolved_cdi -= s.unresolved_cdi;
  for (const auto& [owner, n] : s.programs)
    if ((sum_.programs[owner] -= n) == 0) sum_.programs.erase(owner);
  if (s.identity_conflict) {
    auto it = identity_problems_.find(s.identity_problem);
    if (it != identity_problems_.end() && --it->second == 0) identity_problems_.erase(it);
  }
  if (s.problem) problems_.erase(dir);
}

void GaugeTally::rebuild(const ContainerTable& table, const AllocationIndex& allocations) {
  *this = GaugeTally{};
  for (const auto& [dir, w] : table) {
    GaugeShare s = gauge_share(dir, w, allocations);
    add(dir, s);
    shares_.emplace(dir, std::move(s));
  }
}

void GaugeTally::update(const std::string& dir, const WatchedContainer* w, const AllocationIndex& allocations) {
  auto it = shares_.find(dir);
  if (it != shares_.end()) {
    subtract(dir, it->second);
    if (!w) {
      shares_.erase(it);
      return;
    }
    it->second = gauge_share(dir, *w, allocations);
    add(dir, it->second);
    return;
  }
  if (!w) return;
  GaugeShare s = gauge_share(dir, *w, allocations);
  add(dir, s);
  shares_.emplace(dir, std::move(s));
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
  tally.rebuild(table, allocations);
  return tally.counts(merged);
}

}  // namespace gdw
