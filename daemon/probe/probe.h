// The eBPF probe (bpf/devwatch.bpf.c): tracepoint programs that report who writes device
// rules, which opens of GPU nodes failed with EPERM, device-program (v2) loads and
// attach/detach, and cgroup mkdir/rmdir. Events arrive through a BPF ring buffer whose
// epoll fd the daemon polls in its own event loop; there is no reader thread.
//
// Two tiers, by what they cost the rest of the node:
//  - always attached: the capability-check tracepoint (rule writes with writer and rule,
//    device-program loads) and cgroup mkdir/rmdir. Unrelated syscalls never pass there.
//  - the syscall hook (sys_exit), attached with set_syscall_hook(): denied opens, exact v2
//    attach/detach/link events, and the results of rule writes. While it is attached
//    every syscall on the machine takes the kernel's syscall-tracing slow path.
// On kernels without the cap_capable tracepoint (< 6.14) rule writes are only seen, whole,
// by the syscall hook (rule_writes_need_syscall_hook()).
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <variant>

#include "core/result.h"

namespace gdw {

struct ProcessInfo {
  pid_t pid = 0;  // tgid
  pid_t tid = 0;
  std::string comm;
  pid_t parent_pid = 0;
  std::string parent_comm;
  std::uint64_t cgroup_id = 0;          // the process's cgroup v2 id (bpf_get_current_cgroup_id)
  std::uint64_t devices_cgroup_id = 0;  // its cgroup v1 devices cgroup id, 0 when none
};

// A write to devices.allow / devices.deny (cgroup v1).
struct RuleWriteEvent {
  ProcessInfo writer;
  std::uint64_t target_cgroup_id = 0;  // the cgroup whose file was written (directory inode)
  bool deny = false;                   // devices.deny (else devices.allow)
  std::string rule;                    // what was written, trailing newline removed
  // Bytes written or -errno. Seen at the permission check, it is known only when that
  // check refused the write (-EPERM); otherwise a RuleWriteResultEvent brings it while the
  // syscall hook is attached.
  std::optional<std::int64_t> result;
  bool seen_at_syscall_exit = false;  // else at the kernel's CAP_SYS_ADMIN check
  std::uint64_t ktime_ns = 0;         // CLOCK_MONOTONIC when seen
};

// The syscall result of a RuleWriteEvent that was reported without one.
struct RuleWriteResultEvent {
  pid_t pid = 0;
  pid_t tid = 0;
  std::uint64_t target_cgroup_id = 0;
  std::int64_t result = 0;            // bytes written or -errno
  std::uint64_t write_ktime_ns = 0;   // the RuleWriteEvent's ktime_ns
};

// bpf(BPF_PROG_LOAD) of a cgroup device program (cgroup v2), seen at its CAP_BPF check:
// the caller is about to attach it somewhere. The attach itself is only seen by the
// syscall hook (DeviceProgramEvent).
struct DeviceProgramLoadEvent {
  ProcessInfo caller;
  std::uint64_t ktime_ns = 0;
};

// An open() of a character device that failed with EPERM inside a watched cgroup.
struct DeniedOpenEvent {
  ProcessInfo opener;
  std::string path;  // as passed to openat
  int dfd = -100;    // openat's directory fd (AT_FDCWD) that a relative path is relative to
  int flags = 0;     // open flags (O_RDONLY / O_WRONLY / O_RDWR ...)
  std::uint32_t major = 0;  // always a watched major: unresolvable opens are not delivered
  std::uint32_t minor = 0;
  std::uint64_t ktime_ns = 0;
};

// bpf(2) on BPF_CGROUP_DEVICE programs (cgroup v2).
struct DeviceProgramEvent {
  enum class Command { kProgAttach, kProgDetach, kLinkCreate, kLinkDetach, kLinkUpdate };
  Command command = Command::kProgAttach;
  ProcessInfo caller;
  std::uint64_t target_cgroup_id = 0;
  std::uint32_t prog_id = 0;
  std::uint32_t replaced_prog_id = 0;  // BPF_F_REPLACE / LINK_UPDATE old program, 0 if none
  std::uint32_t flags = 0;
  std::int64_t result = 0;
  std::uint64_t ktime_ns = 0;
};

struct CgroupLifecycleEvent {
  bool created = false;  // mkdir (else rmdir)
  std::uint32_t hierarchy_id = 0;
  std::uint64_t cgroup_id = 0;
  int level = 0;
  std::string path;  // relative to the hierarchy root, as the tracepoint reports it
};

using ProbeEvent = std::variant<RuleWriteEvent, RuleWriteResultEvent, DeniedOpenEvent, DeviceProgramEvent,
                                DeviceProgramLoadEvent, CgroupLifecycleEvent>;

struct ProbeStats {
  std::uint64_t events = 0;
  std::uint64_t ring_buffer_drops = 0;  // events the kernel side could not reserve space for
  // Denied opens in watched cgroups whose path was not registered with watch_device_node and
  // could not be stat'ed in the opener's root afterwards (it had exited): not delivered.
  std::uint64_t unresolved_denied_opens = 0;
};

struct ProbeOptions {
  // Use the cap_capable tracepoint when the kernel has it. false: behave as on a kernel
  // without it (rule writes only through the syscall hook).
  bool use_capability_tracepoint = true;
  // Attach the syscall hook at load (it can be attached and detached later).
  bool syscall_hook = false;
};

class Probe {
 public:
  // Loads every program and attaches the always-on ones (and the syscall hook when
  // options.syscall_hook). The error says why in words an operator can act on (no BTF,
  // missing CAP_BPF/CAP_PERFMON, verifier rejection with the program name, ...).
  static Result<std::unique_ptr<Probe>> load(const ProbeOptions& options = {});
  virtual ~Probe() = default;

  // Attaches (true) or detaches (false) the syscall hook; nothing when already so.
  virtual Status set_syscall_hook(bool attached) = 0;
  virtual bool syscall_hook_attached() const = 0;
  // True when rule writes are seen only while the syscall hook is attached (the kernel
  // has no cap_capable tracepoint, or options said not to use it).
  virtual bool rule_writes_need_syscall_hook() const = 0;

  // An fd that becomes readable when events are waiting (the ring buffer's epoll fd).
  virtual int fd() const = 0;
  // Delivers every waiting event to `handler`; never blocks. Returns the number delivered.
  virtual Result<int> consume(const std::function<void(const ProbeEvent&)>& handler) = 0;

  // Filters for denied opens: only processes whose cgroup (v1 devices cgroup id or v2
  // cgroup id) is watched, and only devices of watched majors, produce events. The kernel
  // side keeps an open only when it failed with EPERM in a watched cgroup. Its device
  // number comes from the path string: a path registered with watch_device_node is
  // resolved in the kernel (and dropped there unless its major is watched); any other
  // path is stat'ed by consume() in the opener's root/cwd/dirfd under /proc/<pid>, and
  // delivered only if it is a character device of a watched major.
  virtual Status watch_cgroup(std::uint64_t cgroup_id) = 0;
  virtual Status unwatch_cgroup(std::uint64_t cgroup_id) = 0;
  virtual Status watch_major(std::uint32_t major) = 0;
  // Registers a node path exactly as processes pass it to open() (e.g. "/dev/nvidia0", the
  // same string inside containers) so denied opens of it are attributed in the kernel,
  // also after the opener has exited. The path must be shorter than 256 bytes.
  virtual Status watch_device_node(const std::string& path, std::uint32_t major, std::uint32_t minor) = 0;

  virtual ProbeStats stats() const = 0;
};

}  // namespace gdw

namespace gdw {

// Whether some process on this node has gpu-devwatch's probe loaded (its programs are
// named gdw_sys_exit, gdw_cap_check, gdw_cg_mkdir, gdw_cg_rmdir), and whether its syscall
// hook is attached (a link to gdw_sys_exit exists). Needs CAP_SYS_ADMIN to list them.
struct ProbePresence {
  bool loaded = false;
  bool syscall_hook_attached = false;
};
Result<ProbePresence> probe_loaded_on_node();

}  // namespace gdw
