// Attribution: who revoked. Turns the probe's records (rule writes and their results,
// device program loads and attaches) into Revocations kept on the containers they hit, and
// settles which one a repair names (core/revocation.h has the pure rules: the window, the
// pending writes of a container not yet known as a GPU container).
//
// Writer names come from the probe's record (comm, parent comm) and the executable read
// once per process (WriterExecutables); the metric label is a recognised name from a
// bounded set (core/writer_name.h), never the tenant's text.
#pragma once

#include <unistd.h>

#include <optional>

#include "core/revocation.h"
#include "metrics/probe_metrics.h"
#include "probe/probe.h"
#include "service/container_table.h"
#include "service/writer_executables.h"

namespace gdw {

class Attribution {
 public:
  Attribution(ContainerTable& containers, ProbeMetrics metrics) : containers_(containers), metrics_(metrics) {}

  // A deny-rule write: kept on its container when it takes away what a GPU container needs
  // (or, young non-GPU container, kept pending). Returns the GPU container it named, so a
  // repair log line waiting for it can go out now.
  WatchedContainer* rule_write(const RuleWriteEvent& ev);
  // The write failed after all: it revoked nothing, and no repair names it.
  void rule_write_result(const RuleWriteResultEvent& ev);

  // cgroup v2 without the syscall hook: the latest device program load by someone else;
  // false when it was ours.
  // `action`: what the re-reads it leads to name the caller for (an attach seen ahead of
  // its install, lsm/bpf, is named as that attach).
  // read_exe: its executable now (else when a repair names it, after the grant).
  bool program_load(const DeviceProgramLoadEvent& ev, std::string action = "loading a device program",
                    bool read_exe = true);
  // The latest program load, while it can still explain a repair triggered now.
  const Revocation* program_loader(Clock::time_point now) const;
  // An attach/detach/link change of a device program: the GPU container it is on, when
  // someone else made it and it succeeded (O(1): the record is read on the reaction's path).
  WatchedContainer* program_change(const DeviceProgramEvent& ev);
  // The cause such a change hands to its container's repair: put together once that
  // repair has found something missing, after its grant (the executable later still).
  Revocation program_change_cause(const DeviceProgramEvent& ev);

  // A check of `w` found `drifted` newly missing after a trigger at `trigger`: names the
  // cause (handed in, or a pending write that explains it) on the container and counts it.
  void explain_drift(WatchedContainer& w, const std::vector<WantedDevice>& drifted, Clock::time_point trigger,
                     const Revocation* cause);

 private:
  // `action` empty: a rule write (the caller sets rule_text). Without `read_exe` the
  // executable is left for read_exe() and the writer named from the comms alone until then.
  Revocation revocation(const ProcessInfo& who, std::string action, std::uint64_t ktime_ns, bool read_exe = true);
  void read_exe(Revocation& r);

  ContainerTable& containers_;
  ProbeMetrics metrics_;
  WriterExecutables executables_;  // who wrote: read once per process
  const pid_t own_pid_ = ::getpid();  // our own writes are not revocations
  std::optional<Revocation> program_loader_;
};

// Our pid as the kernel's probe sees it (the initial pid namespace), or 0 elsewhere: the
// probe leaves that writer's rule writes out (ProbeOptions::ignored_writer_tgid).
std::uint32_t own_tgid_in_the_kernel();

}  // namespace gdw
