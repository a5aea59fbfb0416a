// What the daemon's gauges say, counted from the container table: GPU containers watched,
// missing devices and held back by the fight-loop guard; unidentified containers of pods
// holding devices; identity problems; device programs by owner; CDI names no spec defines;
// which containers do not hold their devices now.
// Counting is pure (tested in memory); the daemon sets the metrics and logs what is new,
// once a burst of events is over (ContainerFleet::update_gauges).
#pragma once

#include <cstddef>
#include <map>
#include <set>
#include <string>

#include "core/allocation_merge.h"
#include "kube/conditions.h"
#include "node/container_target.h"
#include "service/container_table.h"

namespace gdw {

struct GaugeCounts {
  std::size_t watched = 0;            // GPU containers
  std::size_t missing = 0;            // ... missing devices now
  std::size_t throttled = 0;          // ... whose repairs the guard holds back
  std::size_t unidentified = 0;       // containers without identity in pods that hold devices
  std::size_t identity_conflicts = 0;  // bundles contradicting their cgroup
  std::size_t unresolved_cdi = 0;     // CDI names of GPU containers that no spec defines
  std::map<ProgramOwner, std::size_t> programs;  // device programs on GPU containers
  std::set<std::string> identity_problems;       // ambiguous names and conflicts, described
  // The containers missing devices or unidentified, for the node conditions and the
  // readiness gate (kube/conditions.h).
  std::vector<kube::ContainerProblem> problems;
};

GaugeCounts count_gauges(const ContainerTable& table, const MergedAllocations& merged,
                         const AllocationIndex& allocations);

}  // namespace gdw
