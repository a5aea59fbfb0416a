#include "service/repair_loop.h"

#include "log/log.h"

namespace gdw {
namespace {

void earliest(std::optional<Clock::time_point>& at, const std::optional<Clock::time_point>& other) {
  if (other && (!at || *other < *at)) at = other;
}

// A program the probe saw attached to the container's own cgroup: a program-change record
// of a successful (or still running) attach, naming the program. Only where a grant
// follows a look that finds it denying: in observe mode the whole look counts the programs.
std::optional<AttachedProgram> attached_program(const CheckCause& cause, Mode mode) {
  const DeviceProgramEvent* change = cause.program_change;
  if (mode != Mode::kEnforce || !change || cause.program_change_on_subgroup) return std::nullopt;
  if (change->prog_id == 0 || change->result < 0) return std::nullopt;
  if (change->command != DeviceProgramEvent::Command::kProgAttach) return std::nullopt;
  // Seen ahead of its install (lsm/bpf): the program may not be attached yet, and a swap
  // naming it would find nothing to replace. A whole look (the probe link looks again
  // later too).
  if (change->ahead_of_install) return std::nullopt;
  return AttachedProgram{change->prog_id, change->flags};
}

}  // namespace

CheckOutcome RepairLoop::check(DeviceAccess& access, WatchedContainer& w, Clock::time_point trigger,
                               const CheckCause& cause) {
  CheckOutcome out;
  const auto now = Clock::now();
  if (held_back(w.repair, w.retry_armed_at(), now)) return out;
  const bool all_denied_seen = w.all_denied_since_last_check();
  w.last_check = now;
  const std::optional<AttachedProgram> attached = attached_program(cause, settings_.mode);
  const int defer_on_records = settings_.mode == Mode::kEnforce && !cause.after_wait ? cause.records_fd : -1;
  RepairStep step = repair_once(access, w.repair, w.cgroup.cgroup_dir, w.target.desired, now, settings_,
                                all_denied_seen, attached ? &*attached : nullptr, defer_on_records);
  const auto done = Clock::now();  // the grant, if any, is written: what follows is reporting
  if (!step.settled.granted.empty())
    handover_.after_grant(std::chrono::microseconds(config_.daemon.grant_handover_us), loop_.iteration(),
                          cause.records_fd);
  if (step.deferred) {
    out.deferred = true;
    return out;
  }
  if (step.gone) {
    out.gone = true;  // removed mid-repair: quietly dropped
    return out;
  }
  if (!step.observed) {
    daemon_metrics_.event_loop_error(access.observed_source());
    if (step.report_read_error) log::error(step.observed.error().message, w.log_fields());
    return out;
  }
  if (step.observed->programs) w.programs = *step.observed->programs;
  for (const auto& d : step.plan.drifted) metrics_.drift(w.labels, d.name);
  std::optional<Revocation> change_cause;
  const Revocation* named = cause.revocation;
  if (!named && cause.program_change && !step.plan.drifted.empty())
    named = &change_cause.emplace(attribution_.program_change_cause(*cause.program_change));
  attribution_.explain_drift(w, step.plan.drifted, trigger, named);
  report_.plan(w, step);
  earliest(out.retry_at, step.plan.retry_at);
  if (!step.applied) return out;
  if (step.applied->programs_now) w.programs = *step.applied->programs_now;
  earliest(out.retry_at, step.settled.retry_at);
  // Under the systemd driver whatever the scope looked like before: the re-apply may have
  // changed its unit files (runc's create writes its DevicePolicy= drop-ins after the scope
  // exists), and the owner reads them again before it persists.
  if (w.cgroup.leaf.driver == CgroupDriver::kSystemd) out.granted = step.settled.granted;  // before the report takes them
  report_.grants(w, step, trigger, done);
  out.prepare_next_grant = access.next_grant_work_due();
  return out;
}

void RepairLoop::persist_started(WatchedContainer& w) { gdw::persist_started(w.repair, Clock::now(), settings_); }

void RepairLoop::persist_answered(WatchedContainer& w, const std::vector<WantedDevice>& devices,
                                  const std::string& unit, const Status& outcome) {
  gdw::persist_answered(w.repair, devices, outcome.ok(), Clock::now(), settings_);
  metrics_.regrant(outcome.ok(), "systemd");
  report_.persisted(w, devices, unit, outcome);
}

}  // namespace gdw
