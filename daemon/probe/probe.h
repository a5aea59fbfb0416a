// The eBPF probe (bpf/devwatch.bpf.c): tracepoint programs that report who writes device
// rules, which opens of GPU nodes failed with EPERM, device-program (v2) loads and
// attach/detach, and cgroup mkdir/rmdir. Events arrive through a BPF ring buffer whose
// epoll fd the daemon polls in its own event loop; there is no reader thread. Nothing here
// looks up a path a process passed to the kernel: tenant input must never block that loop.
//
// Two tiers, by what they cost the rest of the node:
//  - always attached, as the node's device policy needs them (focus()): the capability
//    hook (cap_capable: rule writes with writer and rule, cgroup v1), the attach hook
//    (attaches of device programs to watched cgroups, at the kernel's allocation of their
//    effective program array: kmalloc, filtered on its call site first, cgroup v2), and
//    cgroup mkdir/rmdir. Unrelated syscalls return at the first comparisons, but pay for
//    the tracepoint's dispatch where they pass one. Where the attach hook cannot be
//    loaded, device program loads are reported instead (their CAP_BPF check).
//  - the syscall hook (sys_exit), attached with set_syscall_hook(): denied opens, exact v2
//    attach/detach/link events, and the results of rule writes. While it is attached
//    every syscall on the machine takes the kernel's syscall-tracing slow path.
// On kernels without the cap_capable tracepoint (< 6.14) rule writes are seen on the
// devices controller's write path (fexit) where the kernel allows BPF trampolines, else
// only, whole, by the syscall hook (rule_writes_need_syscall_hook()).
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <functional>
#include <limits>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <variant>

#include "core/attach_hook_choice.h"
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
  std::uint64_t start_time_ns = 0;      // when the process started (ns since boot): pid + this is unique
  int cpu = -1;                         // the CPU it ran on as the probe recorded it (-1: unknown)
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

// An open() of a registered GPU node path (watch_device_node) that failed with EPERM
// inside a watched cgroup. Denied opens of any other path are only counted
// (other_denied_opens).
struct DeniedOpenEvent {
  ProcessInfo opener;
  std::string path;  // as passed to openat: a registered path, never looked up
  int dfd = -100;    // openat's directory fd (AT_FDCWD)
  int flags = 0;     // open flags (O_RDONLY / O_WRONLY / O_RDWR ...)
  std::uint32_t major = 0;  // the device registered for the path (always a watched major)
  std::uint32_t minor = 0;
  std::uint64_t ktime_ns = 0;
};

// bpf(2) on BPF_CGROUP_DEVICE programs (cgroup v2): seen by the attach hook while the
// kernel installs an attach to a watched cgroup (`attaching`: no result yet, and a query
// made after it sees the attach done or failed), or at syscall exit by the syscall hook.
struct DeviceProgramEvent {
  enum class Command { kProgAttach, kProgDetach, kLinkCreate, kLinkDetach, kLinkUpdate };
  Command command = Command::kProgAttach;
  ProcessInfo caller;
  std::uint64_t target_cgroup_id = 0;
  std::uint32_t prog_id = 0;
  std::uint32_t replaced_prog_id = 0;  // BPF_F_REPLACE / LINK_UPDATE old program, 0 if none
  std::uint32_t flags = 0;
  std::int64_t result = 0;
  bool attaching = false;
  // Seen at the start of the bpf() call (the attach hook on lsm/bpf), before the kernel
  // installs it: a look made now may come before the attach (the owner looks again).
  bool ahead_of_install = false;
  std::uint64_t ktime_ns = 0;
};

struct CgroupLifecycleEvent {
  bool created = false;  // mkdir (else rmdir)
  ProcessInfo caller;    // who made (removed) it
  std::uint32_t hierarchy_id = 0;
  std::uint64_t cgroup_id = 0;
  int level = 0;
  std::string path;  // relative to the hierarchy root, as the tracepoint reports it
};

// A writer put there with await_writer_exit() is exiting: every thread of it is in do_exit,
// so its apply has ended (its pidfd turns readable only once the kernel has torn it down).
struct WriterExitEvent {
  pid_t pid = 0;  // tgid
  std::uint64_t ktime_ns = 0;
};

using ProbeEvent = std::variant<RuleWriteEvent, RuleWriteResultEvent, DeniedOpenEvent, DeviceProgramEvent,
                                DeviceProgramLoadEvent, CgroupLifecycleEvent, WriterExitEvent>;

struct ProbeStats {
  std::uint64_t events = 0;
  std::uint64_t ring_buffer_drops = 0;  // events the kernel side could not reserve space for
};

struct ProbeOptions {
  // Use the cap_capable tracepoint when the kernel has it. false: behave as on a kernel
  // without it (rule writes only through the syscall hook).
  bool use_capability_tracepoint = true;
  // Attach the syscall hook at load (it can be attached and detached later).
  bool syscall_hook = false;
  // On a kernel without the cap_capable tracepoint, see rule writes on the devices
  // controller's write path where the kernel allows it (write_path_hook()); false: as on a
  // kernel that refuses BPF trampolines.
  bool write_path_hook = true;
  // A process (tgid, as the initial pid namespace numbers it) whose rule writes are not
  // reported: the daemon's own grants. 0: none.
  std::uint32_t ignored_writer_tgid = 0;
  // Writes to devices.allow are reported too (the daemon needs only devices.deny's).
  bool report_allow_writes = true;
  // Report attaches of device programs to watched cgroups as they happen (where the kernel
  // allows it: attach_hook()); false: device program loads are reported instead.
  bool attach_hook = true;
  // The attach hook's kinds that may be loaded and tried (core/attach_hook_choice.h), the
  // cheapest the kernel allows attached: all of them but in tests and benches.
  std::set<AttachHookKind> attach_hook_kinds{AttachHookKind::kLsm, AttachHookKind::kFexit, AttachHookKind::kKmalloc};
};

// What a node's device policy is made of, which decides the always-on hooks worth their
// cost (Probe::focus).
enum class DevicePolicyForm {
  kUnknown,    // not located yet: every hook
  kRuleFiles,  // cgroup v1: devices.allow / devices.deny, written by runtimes and systemd
  kPrograms,   // cgroup v2: BPF_CGROUP_DEVICE programs
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
  // has no cap_capable tracepoint, or options said not to use it, and refuses the write
  // path hook).
  virtual bool rule_writes_need_syscall_hook() const = 0;
  // Whether device program attaches to watched program cgroups are reported as they happen
  // (the attach hook); else only their loads are, and the attach itself only while the
  // syscall hook is attached. attach_hook_kind(): which of its kinds is attached (lsm/bpf,
  // fexit, kmalloc); attach_hook_choice(): that, with why each cheaper kind was refused
  // (when none is attached: why each was refused, then whether the capability hook is
  // there to see program loads).
  virtual bool attach_hook() const = 0;
  virtual std::optional<AttachHookKind> attach_hook_kind() const = 0;
  virtual AttachHookChoice attach_hook_choice() const = 0;
  // Whether device program loads are reported while the attach hook is attached (once
  // focused on programs; every kind has a load point: lsm/bpf at the load's start, fexit
  // with an fentry on bpf_prog_alloc, kmalloc where the kernel's symbols name the load's
  // allocation; loads from inside a watched program cgroup and by the init process): a
  // heads-up that wakes the reader while the verifier runs, before the attach that
  // normally follows.
  virtual bool program_loads_ahead() const = 0;
  // Benches and tests: attaches that kind of the attach hook instead of the one chosen
  // (kCapability: none, the capability hook instead), where it was loaded.
  virtual Status use_attach_hook(AttachHookKind kind) = 0;
  // Attaches only the always-on hooks `form` needs, each of which runs on unrelated system
  // calls: kRuleFiles, the capability hook (rule writes; every mmap of writable memory
  // passes a CAP_SYS_ADMIN check); kPrograms, the attach hook (its cheapest kind the
  // kernel takes), or where the kernel refuses every kind the capability hook (program
  // loads, reported then); kUnknown (as loaded), both. An attach hook refused says why in
  // attach_hook_choice(); the error is the capability hook's.
  virtual Status focus(DevicePolicyForm form) = 0;
  // Whether the capability hook (tp_btf/cap_capable) is attached.
  virtual bool capability_hook() const = 0;
  // Kernels without the cap_capable tracepoint: whether rule writes are seen on the devices
  // controller's write path (fexit/devcgroup_access_write, where the kernel allows BPF
  // trampolines), attached as the capability hook would be; the refusal says why it was
  // not loaded (empty: loaded, or not needed).
  virtual bool write_path_hook() const = 0;
  virtual const std::string& write_path_hook_refusal() const = 0;

  // An fd that becomes readable when events are waiting (the ring buffers' epoll fd).
  virtual int fd() const = 0;
  // Delivers waiting events to `handler`, at most `max_records` records (rule writes and
  // device-program changes before denied opens); never blocks. What is left stays for
  // the next call and keeps fd() readable. Returns the number delivered.
  virtual Result<int> consume(const std::function<void(const ProbeEvent&)>& handler,
                              int max_records = std::numeric_limits<int>::max()) = 0;

  // Denied opens, decided in the kernel (bpf/devwatch_denied_opens.bpf.h explains why):
  // an open that failed with EPERM in a watched cgroup (v1 devices cgroup id or v2 cgroup
  // id) whose path string is registered with watch_device_node, of a watched major, is
  // delivered as a DeniedOpenEvent; any other denied open there is only counted per
  // cgroup. No path a process passed is ever looked up by this side.
  // Watching a watched cgroup again keeps its count.
  virtual Status watch_cgroup(std::uint64_t cgroup_id) = 0;
  virtual Status unwatch_cgroup(std::uint64_t cgroup_id) = 0;
  // The cgroup's denied opens of anything but a registered GPU node path since it was
  // watched (only while the syscall hook was attached). One map lookup, no events.
  virtual Result<std::uint64_t> other_denied_opens(std::uint64_t cgroup_id) const = 0;
  virtual Status watch_major(std::uint32_t major) = 0;
  // Cgroups whose device program attaches the attach hook reports (GPU containers, and
  // crun's sub-cgroups of them). An attach anywhere else is not reported.
  virtual Status watch_program_cgroup(std::uint64_t cgroup_id) = 0;
  virtual Status unwatch_program_cgroup(std::uint64_t cgroup_id) = 0;
  // Registers a node path exactly as processes pass it to open() (e.g. "/dev/nvidia0", the
  // same string inside containers) so denied opens of it are attributed in the kernel,
  // also after the opener has exited. The path must be shorter than 256 bytes.
  virtual Status watch_device_node(const std::string& path, std::uint32_t major, std::uint32_t minor) = 0;
  // A writer (tgid) whose exit is awaited: a WriterExitEvent comes once all of its threads
  // have entered do_exit, and the entry is gone then. Entries of processes that ended
  // before they were put there are evicted when the table (1024) is full.
  virtual Status await_writer_exit(pid_t pid) = 0;

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
