// The container fleet's part of reading the probe: what one read's records ask of it
// (service/probe_link.h: ProbeBatch), and the looks after a device program load.
#include "service/arm_timer.h"
#include "service/container_fleet.h"

namespace gdw {
namespace {

// cgroup v2 without the syscall hook: after a device program load (its attach follows from
// the same process, normally within microseconds), the GPU containers' programs are re-read
// at these delays after the latest load; program_query_interval stays the fallback.
constexpr Clock::duration kProgramSweep[] = {std::chrono::milliseconds(1), std::chrono::milliseconds(10),
                                             std::chrono::milliseconds(100), std::chrono::seconds(1)};

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
