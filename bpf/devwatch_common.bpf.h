/* devwatch (BPF side), shared by every program family: the architecture's syscall numbers,
 * CO-RE spellings of kernel structs that moved, the settings user space sets before load,
 * the ring buffer and counters every family reports through, and the task / fd helpers
 * they all read the kernel with. Included only by devwatch.bpf.c (one object, one
 * skeleton); each family header includes this one first.
 */
#ifndef GDW_DEVWATCH_COMMON_BPF_H
#define GDW_DEVWATCH_COMMON_BPF_H

#include "vmlinux.h"

#include <bpf/bpf_core_read.h>
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_tracing.h>

#include "devwatch_events.h"

/* The raw syscall tracepoints carry the architecture's syscall numbers and pt_regs. */
#if defined(__TARGET_ARCH_x86)
#define NR_write 1
#define NR_open 2
#define NR_pwrite64 18
#define NR_writev 20
#define NR_openat 257
#define NR_pwritev 296
#define NR_bpf 321
#define NR_pwritev2 328
#define NR_openat2 437
#define NR_writev_family(nr) \
  ((nr) == NR_write || (nr) == NR_pwrite64 || (nr) == NR_writev || (nr) == NR_pwritev || (nr) == NR_pwritev2)
/* thread_info.status bit of a task inside an ia32 syscall, whose numbers and argument
 * registers differ (the syscalls/ tracepoints skip those too). */
#define TS_COMPAT 0x0002
#define SYSCALL_NR(regs) ((long)(regs)->orig_ax)
#elif defined(__TARGET_ARCH_arm64)
/* The generic table (asm-generic/unistd.h): no open(2), openat(2) only. */
#define NR_openat 56
#define NR_write 64
#define NR_writev 66
#define NR_pwrite64 68
#define NR_pwritev 70
#define NR_bpf 280
#define NR_pwritev2 287
#define NR_openat2 437
#define NR_writev_family(nr) \
  ((nr) == NR_write || (nr) == NR_pwrite64 || (nr) == NR_writev || (nr) == NR_pwritev || (nr) == NR_pwritev2)
/* The saved PSTATE of a task that entered the kernel from AArch32 (a compat syscall,
 * with the 32-bit table's numbers): the architecture's bit, not a TIF_ flag whose number
 * moves between kernel versions. */
#define PSR_MODE32_BIT 0x10
#define SYSCALL_NR(regs) ((long)(regs)->syscallno)
#else
#error "devwatch_common.bpf.h: syscall numbers are only defined for x86_64 and arm64"
#endif

#define CAP_SYS_ADMIN 21
#define CAP_BPF 39
/* task_struct.flags: kernel threads and io_uring workers have no syscall registers. */
#define PF_IO_WORKER 0x00000010
#define PF_KTHREAD 0x00200000
#define CGROUP_SUPER_MAGIC 0x27e0eb
#define CGROUP2_SUPER_MAGIC 0x63677270
#define EPERM 1
#define AT_FDCWD -100

/* kernfs_node.parent became __parent in 6.15; both spellings are resolved at load time. */
struct kernfs_node___before_6_15 {
  struct kernfs_node *parent;
} __attribute__((preserve_access_index));
struct kernfs_node___since_6_15 {
  struct kernfs_node *__parent;
} __attribute__((preserve_access_index));

/* ---- settings, and the maps shared with user space that every family uses -------------- */

/* Set before load: the kernel has no cap_capable tracepoint, so rule writes are reported
 * whole at syscall exit (while the syscall hook is attached). */
const volatile bool rule_writes_at_syscall_exit = false;
/* Set before load: the daemon's own process (its grants are rule writes too, one record
 * each, which it would only read to drop). 0: every writer is reported. */
const volatile __u32 ignored_writer_tgid = 0;
/* Set before load: writes to devices.allow are reported too. The daemon leaves them out:
 * an allow write cannot revoke, and a re-apply writes a dozen of them per container, each
 * record a wake-up of the daemon for nothing. */
const volatile bool report_allow_writes = true;
/* Written by user space while the program runs: the syscall hook is attached, so a rule
 * write seen at its permission check should have its result reported at exit. */
volatile bool syscall_hook_attached = false;

struct {
  __uint(type, BPF_MAP_TYPE_RINGBUF);
  __uint(max_entries, 256 * 1024);
} events SEC(".maps");

struct {
  __uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
  __uint(max_entries, 1);
  __type(key, __u32);
  __type(value, __u64);
} ring_buffer_drops SEC(".maps");

/* Cgroup ids whose denied opens are reported: v2 ids and v1 devices cgroup ids (each the
 * kernfs id of the directory in its own hierarchy; a collision only widens the filter).
 * The value counts, per CPU, the cgroup's denied opens of anything but a registered GPU
 * node path: those are only counted here, never put into a ring buffer (see
 * devwatch_denied_opens.bpf.h). User space adds the CPUs' values up. */
struct {
  __uint(type, BPF_MAP_TYPE_PERCPU_HASH);
  __uint(max_entries, 16384);
  __type(key, __u64);
  __type(value, __u64);
} watched_cgroups SEC(".maps");

/* ---- helpers ------------------------------------------------------------------------------- */

static __always_inline void count_drop(void) {
  __u32 zero = 0;
  __u64 *drops = bpf_map_lookup_elem(&ring_buffer_drops, &zero);
  if (drops) *drops += 1; /* per-CPU value: no atomic needed */
}

static __always_inline void *reserve_event(__u64 size) {
  void *event = bpf_ringbuf_reserve(&events, size, 0);
  if (!event) count_drop();
  return event;
}

static __always_inline bool in_compat_syscall(struct task_struct *task) {
#if defined(__TARGET_ARCH_x86)
  return bpf_core_field_exists(struct thread_info, status) && (task->thread_info.status & TS_COMPAT);
#else
  struct pt_regs *regs = (struct pt_regs *)bpf_task_pt_regs(task);
  return regs && (BPF_CORE_READ(regs, pstate) & PSR_MODE32_BIT);
#endif
}

static __always_inline struct kernfs_node *kernfs_parent(struct kernfs_node *kn) {
  if (bpf_core_field_exists(struct kernfs_node___since_6_15, __parent))
    return BPF_CORE_READ((struct kernfs_node___since_6_15 *)kn, __parent);
  return BPF_CORE_READ((struct kernfs_node___before_6_15 *)kn, parent);
}

/* task->cgroups->subsys[devices_cgrp_id]->cgroup->kn->id: the v1 devices cgroup (on a
 * pure v2 system the devices controller is bound there and this is the v2 cgroup). */
static __always_inline __u64 devices_cgroup_id(struct task_struct *task) {
  if (!bpf_core_enum_value_exists(enum cgroup_subsys_id, devices_cgrp_id)) return 0;
  __u32 index = bpf_core_enum_value(enum cgroup_subsys_id, devices_cgrp_id);
  struct css_set *css_set = BPF_CORE_READ(task, cgroups);
  struct cgroup_subsys_state *css = NULL;
  bpf_probe_read_kernel(&css, sizeof(css),
                        (void *)css_set + bpf_core_field_offset(struct css_set, subsys) +
                            index * sizeof(css));
  if (!css) return 0;
  return BPF_CORE_READ(css, cgroup, kn, id);
}

static __always_inline void fill_process(struct gdw_process *p) {
  __u64 pid_tgid = bpf_get_current_pid_tgid();
  struct task_struct *task = (struct task_struct *)bpf_get_current_task();
  p->pid = pid_tgid >> 32;
  p->tid = (__u32)pid_tgid;
  p->cpu = bpf_get_smp_processor_id();
  bpf_get_current_comm(p->comm, sizeof(p->comm));
  struct task_struct *parent = BPF_CORE_READ(task, real_parent);
  p->parent_pid = BPF_CORE_READ(parent, tgid);
  __builtin_memset(p->parent_comm, 0, sizeof(p->parent_comm));
  bpf_probe_read_kernel_str(p->parent_comm, sizeof(p->parent_comm),
                            __builtin_preserve_access_index(&parent->comm));
  p->cgroup_id = bpf_get_current_cgroup_id();
  p->devices_cgroup_id = devices_cgroup_id(task);
  p->start_time_ns = BPF_CORE_READ(task, group_leader, start_time);
}

/* task->files->fdt->fd[fd], NULL when out of range. Runs on every write() on the
 * machine: the table pointers are read directly through the BTF-typed task (no helper
 * call; helper calls are what costs here), only the variable-index slot needs
 * bpf_probe_read_kernel. */
static __always_inline struct file *file_of_fd(struct task_struct *task, __u64 fd_arg) {
  __u32 fd = (__u32)fd_arg;
  struct files_struct *files = task->files;
  if (!files) return NULL;
  struct fdtable *fdt = files->fdt;
  if (fd >= fdt->max_fds) return NULL;
  struct file *file = NULL;
  bpf_probe_read_kernel(&file, sizeof(file), (void *)fdt->fd + (__u64)fd * sizeof(file));
  return file;
}

/* Compares a kernel string with a literal, including the terminating NUL. */
#define KERNEL_STR_EQUALS(kernel_ptr, literal)                                \
  ({                                                                          \
    char copy_[sizeof(literal)] = {};                                         \
    int equal_ = 1;                                                           \
    bpf_probe_read_kernel_str(copy_, sizeof(copy_), (kernel_ptr));            \
    _Pragma("unroll") for (int i_ = 0; i_ < (int)sizeof(literal); i_++) {     \
      if (copy_[i_] != (literal)[i_]) equal_ = 0;                             \
    }                                                                         \
    equal_;                                                                   \
  })

/* The anon-inode name of the file, e.g. "bpf-prog" / "bpf_link". */
static __always_inline const char *file_dentry_name(struct file *file) {
  return (const char *)BPF_CORE_READ(file, f_path.dentry, d_name.name);
}

#endif /* GDW_DEVWATCH_COMMON_BPF_H */
