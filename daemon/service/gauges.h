// What the daemon's gauges say, counted from the container table: GPU containers watched,
// missing devices and held back by the fight-loop guard; unidentified containers of pods
// holding devices; identity problems; device programs by owner; CDI names no spec defines;
// which containers do not hold their devices now.
// Counting is pure (tested in memory); the daemon sets the metrics and logs what is new,
// once a burst of events is over (ContainerFleet::update_gauges). Each container adds its
// share (gauge_share); GaugeTally keeps the sum, so that a check that moves one container's
// share costs that share, not a walk of the table: the daemon's cost per event does not
// grow with the number of containers.
#pragma once

#include <cstddef>
#include <map>
#include <set>
#include <string>
#include <vector>

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

// What `w` adds to the counts now (pure).
GaugeShare gauge_share(const WatchedContainer& w, const AllocationIndex& allocations);

// The counts, kept as the sum of every container's share. Each container keeps the share
// counted for it (WatchedContainer::gauge_share), so taking it out again needs no search.
class GaugeTally {
 public:
  // Every share read again: after anything node-wide (allocations, containers come and go).
  void rebuild(ContainerTable& table, const AllocationIndex& allocations);
  // The share of `w` read again.
  void update(WatchedContainer& w, const AllocationIndex& allocations);
  // `w` leaves the counts (before it leaves the table).
  void remove(WatchedContainer& w);
  // The counts, with the node's ambiguous identities among the problems.
  GaugeCounts counts(const MergedAllocations& merged) const;

 private:
  friend GaugeCounts count_gauges(const ContainerTable&, const MergedAllocations&, const AllocationIndex&);
  void add(const WatchedContainer& w, const GaugeShare& share);
  void subtract(const WatchedContainer& w, const GaugeShare& share);

  GaugeCounts sum_;  // without identity_problems and problems, kept below
  std::map<std::string, std::size_t> identity_problems_;    // text -> containers with it
  std::map<std::string, kube::ContainerProblem> problems_;  // by cgroup directory
};

// The counts of the whole table, from scratch (the shares the containers keep untouched).
GaugeCounts count_gauges(const ContainerTable& table, const MergedAllocations& merged,
                         const AllocationIndex& allocations);

}  // namespace gdw
