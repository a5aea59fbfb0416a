// The container fleet's part in never acting inside a runtime's apply (service/apply_waits.h):
// what a check's wait goes by, and the check made when a wait ends.
#include "core/writer_name.h"
#include "runtime/cgroup_names.h"
#include "service/container_fleet.h"

namespace gdw {

ApplyWaits::Request ContainerFleet::apply_wait_request(const WatchedContainer& w, Clock::time_point trigger,
                                                       const CheckCause& cause, bool write_event) const {
  ApplyWaits::Request r{.trigger = trigger, .program_change = cause.program_change};
  bool named = false;
  if (const DeviceProgramEvent* change = cause.program_change) {
    named = true;
    // Named from the record's comms alone: the executable is read after the grant.
    const ProcessInfo& p = change->caller;
    if (writer_waited_for(recognise_writer({p.comm, p.parent_comm, "", p.pid}))) r.writer = p.pid;
  } else if (const auto& rev = w.last_revocation; rev && rev->at > w.last_check) {
    named = true;
    if (writer_waited_for(rev->writer)) r.writer = rev->pid;
  } else if (const Revocation* given = cause.revocation) {
    named = true;
    if (writer_waited_for(given->writer)) r.writer = given->pid;
  }
  r.unnamed_write = write_event && !named;
  return r;
}

bool ContainerFleet::must_wait(WatchedContainer& w, Clock::time_point trigger, const CheckCause& cause,
                               bool write_event) {
  const ApplyWaits::Request r = apply_wait_request(w, trigger, cause, write_event);
  if (!apply_waits_.wait(w, r)) return false;
  // The probe sees the writer's exit start, ~0.3 ms before its pidfd (bench/wake_trace.py;
  // the kernel tears the process down in between). Whatever writer the wait holds is awaited:
  // one a record named (put back in case the LRU table dropped it), and a create's runtime
  // known only by its pid file (systemd's scope, attached before the probe watched it).
  if (const pid_t writer = apply_waits_.writer(w.cgroup.cgroup_dir)) {
    follow_writer(w, writer);
  } else if (w.creating()) {
    // A writer it held has exited and the create goes on (the NVIDIA hook runs inside runc's
    // create): its end is seen as it comes again, the looks for the pid file 100 ms apart.
    watches_.watch_create(w, w.create_marker);
  }
  prepare_grant(w, cause);
  return true;
}

bool ContainerFleet::in_runtime_apply(const WatchedContainer& w) const {
  if (settings_.mode != Mode::kEnforce) return false;  // observe mode never waits (nor persists)
  const std::string& dir = w.cgroup.cgroup_dir;
  return w.creating() || apply_waits_.writer(dir) != 0 || apply_waits_.keeps(dir);
}

void ContainerFleet::prepare_grant(const WatchedContainer& w, const CheckCause& cause) {
  // The program a runtime attached to the container's cgroup or crun's sub-cgroup of it,
  // read while the runtime runs, and its wrapper for what the container wants loaded off the
  // loop: the grant after the wait finds both in the cache (a wrapper is the same whichever
  // of the two it goes to).
  const DeviceProgramEvent* change = cause.program_change;
  if (!access_ || !change || change->prog_id == 0 || change->result < 0 ||
      change->command != DeviceProgramEvent::Command::kProgAttach)
    return;
  access_->prepare_grant({change->prog_id, change->flags}, w.target.desired.wanted);
}

void ContainerFleet::hold_for_runtime(WatchedContainer& w, const ProcessInfo& process) {
  // A runtime that made the container's cgroup (cgroupfs driver) or crun's sub-cgroup of it
  // (systemd driver) applies the device rules next, maybe before the probe watches the new
  // directory and names it; one that wrote or attached in a read may be followed in it by
  // another writer's record. Its apply ends when it exits. A tenant's own process of that
  // name only delays its own container's repair, by at most the limit.
  if (settings_.mode != Mode::kEnforce || !w.is_gpu() ||
      !writer_waited_for(recognise_writer({process.comm, process.parent_comm, "", process.pid})))
    return;
  if (apply_waits_.hold(w, process.pid)) follow_writer(w, process.pid);  // once per hold
}

void ContainerFleet::follow_writer(WatchedContainer& w, pid_t writer) {
  probe_.await_writer_exit(writer);
  // Its exit ends the wait, and the check then finds the pid file written: the file's
  // directory need not wake the loop meanwhile (runc writes two files there, and closes
  // a third as it exits, right when the grant is due).
  watches_.unwatch_create(w);
}

void ContainerFleet::hold_for_makers(WatchedContainer& w) {
  for (const std::string& dir : {w.cgroup.cgroup_dir, w.cgroup.cgroup_dir + "/" + std::string(kCrunSubgroup)})
    if (const auto it = makers_.find(dir); it != makers_.end()) hold_for_runtime(w, it->second);
}

void ContainerFleet::writers_exited(const std::vector<pid_t>& pids) {
  for (pid_t pid : pids)
    for (const std::string& dir : apply_waits_.writer_exited(pid)) check_held(dir);
  apply_waits_.release_ended();
}

void ContainerFleet::on_apply_wait_due(std::string dir) {
  // The loop may run late (a 2-vCPU node's busy runnable queue): a create's pid file can be
  // there while the records of the runtime's mkdir and attach still wait. Read them first,
  // as an inotify event's handler does, so that the runtime is waited for.
  act(probe_.drain(access_ && access_->policy_in_programs()));
  probe_.report_record_delays();
  check_held(dir);
}

void ContainerFleet::check_held(const std::string& dir) {
  WatchedContainer* w = containers_.find(dir);
  if (!w) {
    apply_waits_.forget(dir);
    return;
  }
  const auto kept = apply_waits_.take(dir);
  if (!kept) {
    // Only a hold ended (its runtime exited, or the limit came), or a check ran already.
    if (apply_waits_.drop_hold(dir)) {
      w->apply_wait.since.reset();
      persist(*w);  // what was held back while the runtime applied
    }
    return;
  }
  CheckCause cause{.after_wait = true};
  if (kept->program_change) cause.program_change = &*kept->program_change;
  if (check(*w, kept->trigger, cause)) gauges_moved();
  count_prepared_loads();
}

void ContainerFleet::count_prepared_loads() {
  if (!access_) return;
  const std::size_t loaded = access_->adopt_prepared();
  if (loaded > prepared_loads_counted_)
    repair_metrics_.programs_loaded(loaded - prepared_loads_counted_, /*ahead=*/true);
  prepared_loads_counted_ = loaded;
}

}  // namespace gdw
