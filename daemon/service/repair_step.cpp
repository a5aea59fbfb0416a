#include "service/repair_step.h"

#include <poll.h>

namespace gdw {

namespace {

bool records_waiting(int fd) {
  if (fd < 0) return false;
  struct pollfd p{fd, POLLIN, 0};
  return ::poll(&p, 1, 0) > 0 && (p.revents & POLLIN);
}

}  // namespace

RepairStep repair_once(DeviceAccess& access, RepairState& state, const std::string& cgroup_dir,
                       const DesiredDevices& desired, Clock::time_point now, const RepairSettings& settings,
                       bool all_denied_seen, const AttachedProgram* attached, int unread_records_fd,
                       const std::function<bool()>& apply_going_on) {
  RepairStep step;
  // Every wanted device was denied by the write the probe saw: nothing to read.
  const bool all_missing = all_denied_seen && !access.policy_in_programs() && settings.mode == Mode::kEnforce;
  step.observed = all_missing ? Result<DeviceState>(DeviceState{})
                  : attached  ? access.observe_attached(cgroup_dir, desired, *attached)
                              : access.observe(cgroup_dir, desired);
  if (!step.observed) {
    step.gone = is_cgroup_gone(step.observed.error());
    step.report_read_error = !step.gone && state.read_error_reported.first();
    return step;
  }
  state.read_error_reported.reset();
  const auto& missing = all_missing ? desired.wanted : step.observed->missing;
  if (!missing.empty() && (records_waiting(unread_records_fd) || (apply_going_on && apply_going_on()))) {
    step.deferred = true;
    return step;
  }
  step.plan = plan_repair(state, missing, now, settings);
  if (step.plan.grant.empty()) return step;
  step.applied = access.grant(cgroup_dir, desired.wanted, step.plan.grant);
  step.settled = settle_grants(state, step.applied->devices, now, settings);
  step.gone = step.settled.gone;
  return step;
}

}  // namespace gdw
