#include "service/attribution.h"

#include <sys/stat.h>

#include <cstring>

#include "core/writer_name.h"
#include "log/log.h"

namespace gdw {
namespace {

const char* program_command_text(DeviceProgramEvent::Command command) {
  using Command = DeviceProgramEvent::Command;
  switch (command) {
    case Command::kProgAttach: return "attaching";
    case Command::kProgDetach: return "detaching";
    case Command::kLinkCreate: return "linking";
    case Command::kLinkUpdate: return "updating the link of";
    default: return "detaching the link of";
  }
}

}  // namespace

std::uint32_t own_tgid_in_the_kernel() {
  // The DaemonSet runs with hostPID, where getpid() is what the kernel reports. Elsewhere
  // it is another number there, so nothing is left out (rule_write drops ours instead).
  constexpr ino_t kInitialPidNamespaceInode = 0xEFFFFFFCU;  // PROC_PID_INIT_INO
  struct stat st{};
  if (::stat("/proc/self/ns/pid", &st) != 0 || st.st_ino != kInitialPidNamespaceInode) return 0;
  return static_cast<std::uint32_t>(::getpid());
}

Revocation Attribution::revocation(const ProcessInfo& p, std::string action, std::uint64_t ktime_ns,
                                   bool read_exe) {
  Revocation r;
  r.pid = p.pid;
  r.comm = p.comm;
  r.parent_comm = p.parent_comm;
  r.start_time_ns = p.start_time_ns;
  r.exe_unread = true;
  r.action = std::move(action);
  r.at = probe_time(ktime_ns);
  if (read_exe) {
    this->read_exe(r);  // now, while the process may still exist
  } else {
    r.writer = recognise_writer(WriterIdentity{r.comm, r.parent_comm, {}, r.pid});
  }
  return r;
}

void Attribution::read_exe(Revocation& r) {
  if (!r.exe_unread) return;
  ProcessInfo p;
  p.pid = r.pid;
  p.start_time_ns = r.start_time_ns;
  r.exe = executables_.of(p);
  r.writer = recognise_writer(WriterIdentity{r.comm, r.parent_comm, r.exe, r.pid});
  r.exe_unread = false;
}

WatchedContainer* Attribution::rule_write(const RuleWriteEvent& ev) {
  WatchedContainer* w = containers_.by_cgroup_id(ev.target_cgroup_id);
  // A write refused at the permission check is known to have failed; one seen before the
  // kernel parsed it is taken at its word (a deny rule that parses is applied, bar a
  // cgroup with children refusing "a"), and its result, when the hook reports it, can
  // still withdraw the attribution.
  if (!w || !ev.deny || (ev.result && *ev.result < 0)) return nullptr;
  if (ev.writer.pid == own_pid_) return nullptr;
  auto rule = parse_device_rule(ev.rule);
  if (!rule) return nullptr;
  // A GPU container: it revokes when it matches a wanted device and takes away some of the
  // access it needs. Any other container may be a GPU container whose allocation record
  // is still on its way: its deny rules are kept (bounded) for its first repair, while it
  // is young (a record is late by seconds, not more; old containers cost nothing here).
  const bool gpu = w->is_gpu();
  if (gpu && !rule_revokes(*rule, w->target.desired.wanted)) return nullptr;
  if (!gpu && Clock::now() - w->first_seen > PendingRevocations::kMaxAge) return nullptr;
  Revocation r = revocation(ev.writer, {}, ev.ktime_ns);
  r.rule_text = ev.rule;
  r.tid = ev.writer.tid;
  r.ktime_ns = ev.ktime_ns;
  r.rule = *rule;
  if (!gpu) {
    w->pending_revocations.add(std::move(r), Clock::now());
    return nullptr;
  }
  w->last_revocation = std::move(r);
  metrics_.revocation(w->last_revocation->writer);
  return w;
}

void Attribution::rule_write_result(const RuleWriteResultEvent& ev) {
  if (ev.result >= 0) return;
  WatchedContainer* w = containers_.by_cgroup_id(ev.target_cgroup_id);
  if (!w) return;
  if (!w->is_gpu()) {
    w->pending_revocations.withdraw(ev.tid, ev.write_ktime_ns);
    return;
  }
  log::debug("rule write by pid " + std::to_string(ev.pid) + " failed: " + std::strerror(static_cast<int>(-ev.result)),
             w->log_fields());
  // It revoked nothing: a repair must not name it.
  if (w->last_revocation && w->last_revocation->tid == ev.tid && w->last_revocation->ktime_ns == ev.write_ktime_ns)
    w->last_revocation.reset();
}

bool Attribution::program_load(const DeviceProgramLoadEvent& ev, std::string action, bool read_exe) {
  if (ev.caller.pid == own_pid_) return false;
  program_loader_ = revocation(ev.caller, std::move(action), ev.ktime_ns, read_exe);
  return true;
}

const Revocation* Attribution::program_loader(Clock::time_point now) const {
  return program_loader_ && explains(program_loader_->at, now) ? &*program_loader_ : nullptr;
}

WatchedContainer* Attribution::program_change(const DeviceProgramEvent& ev) {
  if (ev.caller.pid == own_pid_ || ev.result < 0) return nullptr;
  WatchedContainer* w = containers_.by_cgroup_id(ev.target_cgroup_id);
  return w && w->is_gpu() ? w : nullptr;
}

Revocation Attribution::program_change_cause(const DeviceProgramEvent& ev) {
  const std::string action =
      std::string(program_command_text(ev.command)) + " device program " + std::to_string(ev.prog_id);
  // The executable is read once the repair has granted (explain_drift): a readlink of
  // /proc/<pid>/exe walks /proc, a large share of the syscall time before the attach. The
  // attacher normally still runs then (runc and systemd detach old programs after the
  // attach); one gone by then is named from its comms, as a gone writer always was.
  return revocation(ev.caller, action, ev.ktime_ns, /*read_exe=*/false);
}

void Attribution::explain_drift(WatchedContainer& w, const std::vector<WantedDevice>& drifted,
                                Clock::time_point trigger, const Revocation* cause) {
  // A container revoked before it was known as a GPU container: the write kept for it
  // names this, its first repair, when it explains what is missing.
  std::optional<Revocation> adopted;
  if (!w.pending_revocations.empty()) {
    if (!cause && !drifted.empty()) adopted = w.pending_revocations.take_explaining(drifted, Clock::now());
    w.pending_revocations.clear();
    if (adopted) cause = &*adopted;
  }
  if (!cause || drifted.empty()) return;
  w.last_revocation = *cause;
  w.last_revocation->cause_of = trigger;
  read_exe(*w.last_revocation);  // after the repair's grant (RepairLoop::check)
  metrics_.revocation(cause->writer);
}

}  // namespace gdw
