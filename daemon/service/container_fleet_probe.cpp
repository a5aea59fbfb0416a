// The container fleet's part of reading the probe: what one read's records ask of it
// (service/probe_link.h: ProbeBatch), and the looks after a device program load.
#include <sched.h>

#include <algorithm>

#include "service/arm_timer.h"
#include "service/container_fleet.h"

namespace gdw {
namespace {

// cgroup v2 without the syscall hook: after a device program load (its attach follows from
// the same process, normally within microseconds), the GPU containers' programs are re-read
// at these delays after the latest load; program_query_interval stays the fallback.
constexpr Clock::duration kProgramSweep[] = {std::chrono::milliseconds(1), std::chrono::milliseconds(10),
                                             std::chrono::milliseconds(100), std::chrono::seconds(1)};
// With the attach hook: a look at a GPU container a process inside of which loads a device
// program costs the loop ~50 µs on a 2-vCPU VM; a tenant loading in a loop (the probe
// reports a load at most once a millisecond) gets one look per this interval.
constexpr Clock::duration kLookAheadInterval = std::chrono::milliseconds(10);

}  // namespace

void ContainerFleet::on_probe_records() {
  act(probe_.drain(access_ && access_->policy_in_programs()));
  probe_.report_record_delays();
}

void ContainerFleet::act(ProbeBatch batch) {
  // New cgroups (a faster trigger than inotify, which stays the fallback) first, and who made
  // each known before any is checked: a runtime that made a container's cgroup or crun's
  // sub-cgroup of it is waited for, also by the check of a container a new pod's scan finds.
  std::erase_if(batch.created, [&](const auto& c) { return !access_ || tree_hierarchy_id_ != c.hierarchy_id; });
  for (const auto& created : batch.created)
    makers_.emplace(node_.kubepods().hierarchy_root + created.path, created.caller);
  for (const auto& created : batch.created)
    dir_created(node_.kubepods().hierarchy_root + created.path, &created.caller);
  makers_.clear();
  if (!batch.created.empty()) gauges_changed();  // containers may have come: all counted again
  for (const auto& writer : batch.writers)
    if (WatchedContainer* w = containers_.by_cgroup_id(writer.cgroup_id)) hold_for_runtime(*w, writer.process);
  for (std::uint64_t id : batch.named)
    if (WatchedContainer* w = containers_.by_cgroup_id(id)) repair_.revocation_named(*w);
  // A re-apply repaired leaves every count as it was: no O(N) gauge walk for it.
  bool moved = false;
  for (const auto& change : batch.program_changes) {
    // Named only if the change leaves wanted devices denied.
    if (WatchedContainer* w = containers_.by_cgroup_id(change.cgroup_id))
      moved |= check(*w, Clock::now(),
                     {.program_change = &change.change, .program_change_on_subgroup = change.on_subgroup},
                     /*write_event=*/true);
  }
  if (moved) gauges_moved();
  writers_exited(batch.writers_exited);
  // A load whose container's change is in this read already: its attach is there, checked.
  std::erase_if(batch.loaded_inside, [&](const ProbeBatch::LoadInside& load) {
    return std::any_of(batch.program_changes.begin(), batch.program_changes.end(),
                       [&](const auto& change) { return change.cgroup_id == load.cgroup_id; });
  });
  if (!batch.loaded_inside.empty() && look_ahead(batch.loaded_inside, ::sched_getcpu())) gauges_moved();
  if (batch.program_loaded) {
    if (!program_sweep_timer_) {
      auto t = loop_.add_timer([this] { sweep_programs(); }, "program-sweep");
      if (!t) return;
      program_sweep_timer_ = std::move(*t);
    }
    program_sweep_step_ = 0;
    arm_timer(program_sweep_timer_, kProgramSweep[0], "program-sweep", daemon_metrics_);
  }
}

bool ContainerFleet::look_ahead(const std::vector<ProbeBatch::LoadInside>& loads, int loop_cpu) {
  // The repair that follows a tenant's own attach ran ~60 µs from its wake-up to its grant
  // on a 2-vCPU VM after the loop slept (cache misses all along: container table, program
  // cache, the code itself); ~40 µs after such a look (docs/performance.md). The look is an
  // ordinary one: it writes only what any check would, and waits as any check would for a
  // runtime's apply to end. On the loader's own CPU it would take that CPU from the
  // verifier, and the scheduler counts it against the loop when the attach wakes it.
  bool moved = false;
  for (const auto& load : loads) {
    WatchedContainer* w = containers_.by_cgroup_id(load.cgroup_id);
    if (!w || !w->is_gpu()) continue;
    const auto now = Clock::now();
    LookAhead outcome = LookAhead::kLooked;
    if (load.cpu >= 0 && load.cpu == loop_cpu) outcome = LookAhead::kSameCpu;
    else if (last_look_ahead_ && now - *last_look_ahead_ < kLookAheadInterval) outcome = LookAhead::kInterval;
    repair_metrics_.look_ahead(outcome);
    if (outcome != LookAhead::kLooked) continue;
    last_look_ahead_ = now;
    moved |= check(*w, now);
  }
  return moved;
}

void ContainerFleet::sweep_programs() {
  if (!access_ || !access_->policy_in_programs()) return;
  const Revocation* cause = attribution_.program_loader(Clock::now());
  for (const auto& dir : containers_.dirs([](const WatchedContainer& w) { return w.is_gpu(); }))
    if (WatchedContainer* w = containers_.find(dir)) check(*w, Clock::now(), {.revocation = cause});
  update_gauges();
  if (++program_sweep_step_ < std::size(kProgramSweep))
    arm_timer(program_sweep_timer_, kProgramSweep[program_sweep_step_] - kProgramSweep[program_sweep_step_ - 1],
              "program-sweep", daemon_metrics_);
}

}  // namespace gdw
