// SPDX-License-Identifier: GPL-2.0
/* devwatch: who changes device access of cgroups, and which GPU opens were denied.
 *
 * BTF-enabled raw tracepoints only (tp_btf; no kprobes/fentry, which not every kernel we
 * run on allows). Two tiers, because of what they cost everything else on the node:
 *
 *  Always attached, on paths unrelated syscalls never take:
 *  - tp_btf/cap_capable (kernel >= 6.14), filtered on the capability first:
 *     CAP_SYS_ADMIN inside write, pwrite64, writev, pwritev, pwritev2 on a cgroup v1
 *       devices.allow / devices.deny: the devices controller checks it before it parses
 *       the rule (devcgroup_update_access), so every rule write passes here with writer,
 *       fd and user buffer in the task's syscall registers. The result is known here only
 *       when the check refused the write; the syscall-exit hook reports the rest.
 *     CAP_BPF (or CAP_SYS_ADMIN), passed, inside bpf(BPF_PROG_LOAD) of a
 *       BPF_PROG_TYPE_CGROUP_DEVICE program: the caller is about to attach a device
 *       program (v2). The attach itself checks no
 *       capability, so this is the nearest point a tracepoint sees without a syscall hook.
 *    Capability checks are frequent (mmap and brk of writable memory check CAP_SYS_ADMIN
 *    for overcommit), so the program returns on its first two comparisons for them.
 *  - tp_btf/cgroup_mkdir, tp_btf/cgroup_rmdir.
 *
 *  Attached by user space only when wanted (the "syscall hook"):
 *  - tp_btf/sys_exit, dispatched on the syscall number. On x86_64 the syscall's argument
 *    registers are still intact in pt_regs at exit and the outcome is known:
 *     openat, openat2, open: opens that failed with EPERM inside a watched cgroup (see
 *       "Denied opens" below): GPU nodes reported, anything else only counted. Any
 *       other result returns on the first comparison.
 *     bpf: attach/detach/replace of BPF_CGROUP_DEVICE programs (cgroup v2 device rules).
 *       A detached link has forgotten its cgroup and an updated link its old program, so
 *       cgroup_device_links remembers both per link id (seeded by user space at load).
 *     write family: the result of a rule write reported at its permission check; or, on
 *       kernels without cap_capable, the whole rule write.
 *    Any program on a syscall tracepoint puts every task of the machine on the syscall
 *    tracing slow path: measured on the 6.18 kernel this was built on, an empty
 *    tp_btf/sys_exit program adds ~110 ns to every syscall (write() to /dev/null takes
 *    ~230 ns), an empty one on syscalls/sys_enter_write ~400 ns per hit (perf tracepoint
 *    path). Hence the tiers.
 *
 * Events leave through two ring buffers (denied opens apart, see below); failed
 * reservations are counted per CPU.
 */
#include "vmlinux.h"

#include <bpf/bpf_core_read.h>
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_tracing.h>

#include "devwatch_events.h"

char LICENSE[] SEC("license") = "GPL";

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
#else
#error "devwatch.bpf.c: syscall numbers are only defined for x86_64"
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
#define ATTR_PREFIX_SIZE 20           /* union bpf_attr bytes we read: up to replace_bpf_fd */
#define BPF_F_REPLACE_FLAG (1U << 2) /* BPF_F_REPLACE is a #define in UAPI, not in BTF */

/* kernfs_node.parent became __parent in 6.15; both spellings are resolved at load time. */
struct kernfs_node___before_6_15 {
  struct kernfs_node *parent;
} __attribute__((preserve_access_index));
struct kernfs_node___since_6_15 {
  struct kernfs_node *__parent;
} __attribute__((preserve_access_index));

/* The attach type of a cgroup link moved from bpf_cgroup_link.type to bpf_link.attach_type
 * in 6.17. */
struct bpf_cgroup_link___before_6_17 {
  struct bpf_link link;
  struct cgroup *cgroup;
  enum bpf_attach_type type;
} __attribute__((preserve_access_index));
struct bpf_link___since_6_17 {
  enum bpf_attach_type attach_type;
} __attribute__((preserve_access_index));

/* ---- settings and maps shared with user space ---------------------------------------- */

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
 * node path: those are only counted here, never put into a ring buffer (see "Denied
 * opens" below). User space adds the CPUs' values up. */
struct {
  __uint(type, BPF_MAP_TYPE_PERCPU_HASH);
  __uint(max_entries, 16384);
  __type(key, __u64);
  __type(value, __u64);
} watched_cgroups SEC(".maps");

/* Denied opens of GPU nodes have a ring buffer of their own: a tenant opening GPU nodes
 * it may not open in a loop can fill this one, never the one carrying rule writes and
 * device-program changes. */
struct {
  __uint(type, BPF_MAP_TYPE_RINGBUF);
  __uint(max_entries, 64 * 1024);
} denied_open_events SEC(".maps");

/* Scratch space for the path of a denied open (too big for the 512-byte BPF stack next
 * to everything else), zero-padded because it is the watched_paths key. */
struct {
  __uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
  __uint(max_entries, 1);
  __type(key, __u32);
  __type(value, struct gdw_path_key);
} open_path_scratch SEC(".maps");

struct {
  __uint(type, BPF_MAP_TYPE_HASH);
  __uint(max_entries, 64);
  __type(key, __u32);
  __type(value, __u8);
} watched_majors SEC(".maps");

struct {
  __uint(type, BPF_MAP_TYPE_HASH);
  __uint(max_entries, 4096);
  __type(key, struct gdw_path_key);
  __type(value, struct gdw_device_number);
} watched_paths SEC(".maps");

/* Rule writes reported at the permission check whose result the syscall hook reports, by
 * tid. LRU: an entry left by a hook detached mid-write is forgotten eventually, and until
 * then it cannot match a later write (the file must be the same and the write would pass
 * the permission check again, replacing the entry). */
struct {
  __uint(type, BPF_MAP_TYPE_LRU_HASH);
  __uint(max_entries, 1024);
  __type(key, __u32);
  __type(value, struct gdw_rule_write_in_flight);
} rule_writes_in_flight SEC(".maps");

/* The last device program load reported per tid: one load passes several capability
 * checks (program load, verifier), and is reported once. */
struct device_program_load_seen {
  __u64 attr; /* user address of the bpf_attr */
  __u64 ktime_ns;
};
struct {
  __uint(type, BPF_MAP_TYPE_LRU_HASH);
  __uint(max_entries, 1024);
  __type(key, __u32);
  __type(value, struct device_program_load_seen);
} device_program_loads SEC(".maps");
/* Checks of one load come within this time of the first (the verifier runs in between). */
#define LOAD_CHECKS_WINDOW_NS (5 * 1000 * 1000ULL)

/* BPF_CGROUP_DEVICE links by link id: what a link no longer tells once detached (its
 * cgroup) or updated (its previous program). Filled at LINK_CREATE / LINK_UPDATE and by
 * user space for links that existed before the probe; LRU because a link released by
 * its holder's exit makes no bpf() call to remove it. */
struct {
  __uint(type, BPF_MAP_TYPE_LRU_HASH);
  __uint(max_entries, 16384);
  __type(key, __u32);
  __type(value, struct gdw_device_link);
} cgroup_device_links SEC(".maps");

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
  return bpf_core_field_exists(struct thread_info, status) && (task->thread_info.status & TS_COMPAT);
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
  p->reserved = 0;
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

static __always_inline __u32 prog_id_of_fd(struct task_struct *task, __u64 fd) {
  struct file *file = file_of_fd(task, fd);
  if (!file || !KERNEL_STR_EQUALS(file_dentry_name(file), "bpf-prog")) return 0;
  struct bpf_prog *prog = BPF_CORE_READ(file, private_data);
  return BPF_CORE_READ(prog, aux, id);
}

static __always_inline struct bpf_link *link_of_fd(struct task_struct *task, __u64 fd) {
  struct file *file = file_of_fd(task, fd);
  if (!file || !KERNEL_STR_EQUALS(file_dentry_name(file), "bpf_link")) return NULL;
  return BPF_CORE_READ(file, private_data);
}

/* A cgroup directory fd (v1 or v2) → its kernfs id, which is the cgroup id. */
static __always_inline __u64 cgroup_id_of_fd(struct task_struct *task, __u64 fd) {
  struct file *file = file_of_fd(task, fd);
  if (!file) return 0;
  struct inode *inode = BPF_CORE_READ(file, f_inode);
  unsigned long magic = BPF_CORE_READ(inode, i_sb, s_magic);
  if (magic != CGROUP2_SUPER_MAGIC && magic != CGROUP_SUPER_MAGIC) return 0;
  struct kernfs_node *kn = BPF_CORE_READ(inode, i_private);
  return BPF_CORE_READ(kn, id);
}

static __always_inline enum bpf_attach_type cgroup_link_attach_type(struct bpf_link *link) {
  if (bpf_core_field_exists(struct bpf_link___since_6_17, attach_type))
    return BPF_CORE_READ((struct bpf_link___since_6_17 *)link, attach_type);
  return BPF_CORE_READ((struct bpf_cgroup_link___before_6_17 *)link, type);
}

/* ---- cgroup v1 rule writes ------------------------------------------------------------ */

/* The devices.allow / devices.deny file behind a write-family syscall's fd, or NULL. */
static __always_inline struct file *rule_file(struct task_struct *task, struct pt_regs *regs, __u32 *deny,
                                              struct kernfs_node **kn_out) {
  struct file *file = file_of_fd(task, PT_REGS_PARM1_SYSCALL(regs));
  if (!file) return NULL;
  struct inode *inode = BPF_CORE_READ(file, f_inode);
  if (BPF_CORE_READ(inode, i_sb, s_magic) != CGROUP_SUPER_MAGIC) return NULL;
  /* A kernfs inode's i_private is its kernfs_node; the node's name is the file name. */
  struct kernfs_node *kn = BPF_CORE_READ(inode, i_private);
  const char *name = BPF_CORE_READ(kn, name);
  if (KERNEL_STR_EQUALS(name, "devices.deny"))
    *deny = 1;
  else if (KERNEL_STR_EQUALS(name, "devices.allow"))
    *deny = 0;
  else
    return NULL;
  *kn_out = kn;
  return file;
}

/* Reports the write of the current syscall (write family, its registers in `regs`) when
 * it targets a devices rule file. Returns the event's ktime, 0 when nothing was reported. */
/* A deny write to a watched container (a GPU container) raises inotify too, and the daemon
 * reads what waits here before it handles that: a wake-up of its own would only put the
 * daemon to sleep once more before the write lands (one per revocation). A global function,
 * verified once on its own: inlined, its branch multiplied the caller's verifier states. */
__noinline __u64 rule_write_submit_flags(__u64 target_cgroup_id, __u32 deny) {
  if (!deny) return 0;
  return bpf_map_lookup_elem(&watched_cgroups, &target_cgroup_id) ? BPF_RB_NO_WAKEUP : 0;
}

static __always_inline __u64 emit_rule_write(struct task_struct *task, struct pt_regs *regs, long nr,
                                             __u32 seen_at, bool result_known, long result,
                                             struct gdw_rule_write_in_flight *in_flight) {
  if (ignored_writer_tgid && BPF_CORE_READ(task, tgid) == ignored_writer_tgid) return 0;
  __u32 deny;
  struct kernfs_node *kn = NULL;
  struct file *file = rule_file(task, regs, &deny, &kn);
  if (!file || (!deny && !report_allow_writes)) return 0;

  struct gdw_rule_write_event *e = reserve_event(sizeof(*e));
  if (!e) return 0;
  e->header.type = GDW_EVENT_RULE_WRITE;
  e->header.reserved = 0;
  e->header.ktime_ns = bpf_ktime_get_ns();
  fill_process(&e->writer);
  /* The cgroup is the directory holding the file; its kernfs id is the cgroup id. */
  struct kernfs_node *directory = kernfs_parent(kn);
  e->target_cgroup_id = BPF_CORE_READ(directory, id);
  e->result = result_known ? result : 0;
  e->result_known = result_known;
  e->seen_at = seen_at;
  e->deny = deny;

  __u64 buf = PT_REGS_PARM2_SYSCALL(regs);
  __u64 count = PT_REGS_PARM3_SYSCALL(regs);
  if (nr == NR_writev || nr == NR_pwritev || nr == NR_pwritev2) {
    /* Only the first iovec: the kernel parses one rule per write anyway. */
    struct iovec first = {};
    bpf_probe_read_user(&first, sizeof(first), (void *)buf);
    buf = (__u64)first.iov_base;
    count = first.iov_len;
  }
  __u32 len = count < GDW_RULE_MAX ? (__u32)count : GDW_RULE_MAX;
  if (bpf_probe_read_user(e->rule, len & (2 * GDW_RULE_MAX - 1) /* bound for the verifier */,
                          (void *)buf) != 0)
    len = 0;
  e->rule_len = len;
  if (in_flight) {
    in_flight->file = (__u64)file;
    in_flight->target_cgroup_id = e->target_cgroup_id;
    in_flight->ktime_ns = e->header.ktime_ns;
  }
  __u64 ktime = e->header.ktime_ns;
  bpf_ringbuf_submit(e, rule_write_submit_flags(e->target_cgroup_id, deny));
  return ktime;
}

/* Syscall exit of a write-family call while the hook is attached: the result of a rule
 * write this thread reported at its permission check. */
static __always_inline int emit_rule_write_result(struct task_struct *task, struct pt_regs *regs, long ret) {
  __u32 tid = (__u32)bpf_get_current_pid_tgid();
  struct gdw_rule_write_in_flight *in_flight = bpf_map_lookup_elem(&rule_writes_in_flight, &tid);
  if (!in_flight) return 0;
  struct gdw_rule_write_in_flight seen = *in_flight;
  bpf_map_delete_elem(&rule_writes_in_flight, &tid);
  /* An entry from a write whose exit went unseen (hook detached meanwhile) names another
   * file, or the same file with a write that never reached the permission check. */
  if ((__u64)file_of_fd(task, PT_REGS_PARM1_SYSCALL(regs)) != seen.file) return 0;

  struct gdw_rule_write_result_event *e = reserve_event(sizeof(*e));
  if (!e) return 0;
  __u64 pid_tgid = bpf_get_current_pid_tgid();
  e->header.type = GDW_EVENT_RULE_WRITE_RESULT;
  e->header.reserved = 0;
  e->header.ktime_ns = bpf_ktime_get_ns();
  e->pid = pid_tgid >> 32;
  e->tid = (__u32)pid_tgid;
  e->target_cgroup_id = seen.target_cgroup_id;
  e->result = ret;
  e->write_ktime_ns = seen.ktime_ns;
  bpf_ringbuf_submit(e, 0);
  return 0;
}

/* ---- denied opens ----------------------------------------------------------------------------
 *
 * Filtering, in order, all at syscall exit:
 *  1. only a result of exactly -EPERM goes on (every other open stops here);
 *  2. only tasks whose v2 cgroup id (bpf_get_current_cgroup_id) or v1 devices cgroup id is
 *     in watched_cgroups;
 *  3. the path string, exactly as passed, is looked up in watched_paths (filled by user
 *     space with the GPU node paths it knows, e.g. "/dev/nvidia0"). Found, with its major
 *     in watched_majors: a record with the map's device number goes to denied_open_events.
 *     Anything else only increments the cgroup's per-CPU counter in watched_cgroups (user
 *     space reports it as device "other").
 *
 * Why the kernel decides: the path comes from the tenant. Resolving it in user space (a
 * stat of /proc/<pid>/root/<path>) runs a lookup of a tenant-chosen path on the daemon's
 * event loop; a path on a hung FUSE or NFS mount, which a tenant can mount itself in its
 * own user namespace, blocks that loop for good, and a loop of EPERM opens (O_NOATIME on
 * a file the process does not own) buried it in records. Now an open that is not of a
 * registered GPU node costs one per-CPU increment and reaches user space as a number.
 * The kernel's own lookup result would be better than the path string (it would also
 * attribute "../dev/nvidia0", relative paths and aliases made with mknod), but no syscall
 * tracepoint sees the inode of a failed open and there is no tracepoint on the device
 * permission path (devcgroup_check_permission / the cgroup device BPF hook); this probe
 * uses BTF tracepoints only. So an alias counts as "other": undercounted, never a lookup.
 */

static __always_inline int emit_denied_open(long ret, __s32 dfd, __u64 filename, __u32 flags) {
  if (ret != -EPERM) return 0;
  __u64 cgroup_id = bpf_get_current_cgroup_id();
  __u64 *other_opens = bpf_map_lookup_elem(&watched_cgroups, &cgroup_id);
  if (!other_opens) {
    __u64 devices_id = devices_cgroup_id((struct task_struct *)bpf_get_current_task());
    if (!devices_id) return 0;
    other_opens = bpf_map_lookup_elem(&watched_cgroups, &devices_id);
    if (!other_opens) return 0;
  }

  __u32 zero = 0;
  struct gdw_path_key *path = bpf_map_lookup_elem(&open_path_scratch, &zero);
  if (!path) return 0;
  __builtin_memset(path->path, 0, sizeof(path->path));
  bpf_probe_read_user_str(path->path, sizeof(path->path), (void *)filename);
  struct gdw_device_number *device = bpf_map_lookup_elem(&watched_paths, path);
  __u32 major = device ? device->major : 0;
  if (!device || !bpf_map_lookup_elem(&watched_majors, &major)) {
    *other_opens += 1; /* per-CPU value: no atomic needed */
    return 0;
  }

  struct gdw_denied_open_event *e = bpf_ringbuf_reserve(&denied_open_events, sizeof(*e), 0);
  if (!e) {
    count_drop();
    return 0;
  }
  e->header.type = GDW_EVENT_DENIED_OPEN;
  e->header.reserved = 0;
  e->header.ktime_ns = bpf_ktime_get_ns();
  fill_process(&e->opener);
  e->dfd = dfd;
  e->flags = flags;
  e->major = major;
  e->minor = device->minor;
  __builtin_memcpy(e->path, path->path, sizeof(e->path));
  bpf_ringbuf_submit(e, 0);
  return 0;
}

/* ---- cgroup v2 device programs ------------------------------------------------------------ */

static __always_inline int emit_device_program(struct task_struct *task, struct pt_regs *regs, long ret) {
  int cmd = (int)PT_REGS_PARM1_SYSCALL(regs);
  if (cmd != BPF_PROG_ATTACH && cmd != BPF_PROG_DETACH && cmd != BPF_LINK_CREATE &&
      cmd != BPF_LINK_UPDATE && cmd != BPF_LINK_DETACH)
    return 0;

  /* The caller's size may be smaller than the prefix we read; fields past it count as
   * zero (the bpf(2) contract). */
  union bpf_attr attr;
  __builtin_memset(&attr, 0, sizeof(attr));
  __u64 size = PT_REGS_PARM3_SYSCALL(regs);
  if (size > ATTR_PREFIX_SIZE) size = ATTR_PREFIX_SIZE;
  if (bpf_probe_read_user(&attr, size, (void *)PT_REGS_PARM2_SYSCALL(regs)) != 0) return 0;

  __u32 command, flags = 0, prog_id = 0, replaced_prog_id = 0;
  __u64 target_cgroup_id = 0;
  if (cmd == BPF_PROG_ATTACH || cmd == BPF_PROG_DETACH) {
    if (attr.attach_type != BPF_CGROUP_DEVICE) return 0;
    command = cmd == BPF_PROG_ATTACH ? GDW_DEVPROG_PROG_ATTACH : GDW_DEVPROG_PROG_DETACH;
    target_cgroup_id = cgroup_id_of_fd(task, attr.target_fd);
    prog_id = prog_id_of_fd(task, attr.attach_bpf_fd);
    flags = attr.attach_flags;
    if (cmd == BPF_PROG_ATTACH && (attr.attach_flags & BPF_F_REPLACE_FLAG))
      replaced_prog_id = prog_id_of_fd(task, attr.replace_bpf_fd);
  } else if (cmd == BPF_LINK_CREATE) {
    if (attr.link_create.attach_type != BPF_CGROUP_DEVICE) return 0;
    command = GDW_DEVPROG_LINK_CREATE;
    target_cgroup_id = cgroup_id_of_fd(task, attr.link_create.target_fd);
    prog_id = prog_id_of_fd(task, attr.link_create.prog_fd);
    flags = attr.link_create.flags;
    struct bpf_link *link = ret >= 0 ? link_of_fd(task, ret) : NULL; /* ret: the new link's fd */
    if (link) {
      __u32 link_id = BPF_CORE_READ(link, id);
      struct gdw_device_link remembered = {.cgroup_id = target_cgroup_id, .prog_id = prog_id};
      bpf_map_update_elem(&cgroup_device_links, &link_id, &remembered, BPF_ANY);
    }
  } else {
    __u32 link_fd = cmd == BPF_LINK_UPDATE ? attr.link_update.link_fd : attr.link_detach.link_fd;
    struct bpf_link *link = link_of_fd(task, link_fd);
    if (!link || BPF_CORE_READ(link, type) != BPF_LINK_TYPE_CGROUP ||
        cgroup_link_attach_type(link) != BPF_CGROUP_DEVICE)
      return 0;
    __u32 link_id = BPF_CORE_READ(link, id);
    struct gdw_device_link *remembered = bpf_map_lookup_elem(&cgroup_device_links, &link_id);
    struct cgroup *cgroup = BPF_CORE_READ(container_of(link, struct bpf_cgroup_link, link), cgroup);
    /* NULL once the detach succeeded. */
    target_cgroup_id = cgroup ? BPF_CORE_READ(cgroup, kn, id) : remembered ? remembered->cgroup_id : 0;
    __u32 link_prog_id = BPF_CORE_READ(link, prog, aux, id);
    if (cmd == BPF_LINK_UPDATE) {
      command = GDW_DEVPROG_LINK_UPDATE;
      prog_id = prog_id_of_fd(task, attr.link_update.new_prog_fd);
      flags = attr.link_update.flags;
      if (remembered)
        replaced_prog_id = remembered->prog_id;
      else if (flags & BPF_F_REPLACE_FLAG)
        replaced_prog_id = prog_id_of_fd(task, attr.link_update.old_prog_fd);
      else if (ret != 0)
        replaced_prog_id = link_prog_id; /* the failed update left it in place */
      if (ret == 0) {
        struct gdw_device_link updated = {.cgroup_id = target_cgroup_id, .prog_id = link_prog_id};
        bpf_map_update_elem(&cgroup_device_links, &link_id, &updated, BPF_ANY);
      }
    } else {
      command = GDW_DEVPROG_LINK_DETACH;
      prog_id = link_prog_id;
      if (ret == 0) bpf_map_delete_elem(&cgroup_device_links, &link_id);
    }
  }

  struct gdw_device_program_event *e = reserve_event(sizeof(*e));
  if (!e) return 0;
  e->header.type = GDW_EVENT_DEVICE_PROGRAM;
  e->header.reserved = 0;
  e->header.ktime_ns = bpf_ktime_get_ns();
  fill_process(&e->caller);
  e->command = command;
  e->flags = flags;
  e->prog_id = prog_id;
  e->replaced_prog_id = replaced_prog_id;
  e->target_cgroup_id = target_cgroup_id;
  e->result = ret;
  bpf_ringbuf_submit(e, 0);
  return 0;
}

/* ---- syscall exit (attached only while user space wants it) ----------------------------- */

/* Runs for every syscall on the machine: the switch is all most of them see. */
SEC("tp_btf/sys_exit")
int BPF_PROG(gdw_sys_exit, struct pt_regs *regs, long ret) {
  struct task_struct *task;
  long nr = SYSCALL_NR(regs);
  switch (nr) {
    case NR_write:
    case NR_pwrite64:
    case NR_writev:
    case NR_pwritev:
    case NR_pwritev2:
      task = bpf_get_current_task_btf();
      if (in_compat_syscall(task)) return 0;
      if (rule_writes_at_syscall_exit) {
        emit_rule_write(task, regs, nr, GDW_SEEN_AT_SYSCALL_EXIT, true, ret, NULL);
        return 0;
      }
      return emit_rule_write_result(task, regs, ret);
    case NR_openat:
      if (ret != -EPERM || in_compat_syscall(bpf_get_current_task_btf())) return 0;
      return emit_denied_open(ret, (__s32)PT_REGS_PARM1_SYSCALL(regs), PT_REGS_PARM2_SYSCALL(regs),
                              (__u32)PT_REGS_PARM3_SYSCALL(regs));
    case NR_openat2: {
      if (ret != -EPERM || in_compat_syscall(bpf_get_current_task_btf())) return 0;
      __u64 flags = 0; /* open_how.flags is the first member */
      bpf_probe_read_user(&flags, sizeof(flags), (void *)PT_REGS_PARM3_SYSCALL(regs));
      return emit_denied_open(ret, (__s32)PT_REGS_PARM1_SYSCALL(regs), PT_REGS_PARM2_SYSCALL(regs),
                              (__u32)flags);
    }
    case NR_open:
      if (ret != -EPERM || in_compat_syscall(bpf_get_current_task_btf())) return 0;
      return emit_denied_open(ret, AT_FDCWD, PT_REGS_PARM1_SYSCALL(regs), (__u32)PT_REGS_PARM2_SYSCALL(regs));
    case NR_bpf:
      task = bpf_get_current_task_btf();
      return in_compat_syscall(task) ? 0 : emit_device_program(task, regs, ret);
  }
  return 0;
}

/* ---- capability checks (always attached) ---------------------------------------------------- */

static __always_inline int emit_device_program_load(struct pt_regs *regs) {
  if ((int)PT_REGS_PARM1_SYSCALL(regs) != BPF_PROG_LOAD) return 0;
  __u32 prog_type = 0; /* union bpf_attr's first member for BPF_PROG_LOAD */
  if (bpf_probe_read_user(&prog_type, sizeof(prog_type), (void *)PT_REGS_PARM2_SYSCALL(regs)) != 0) return 0;
  if (prog_type != BPF_PROG_TYPE_CGROUP_DEVICE) return 0;
  __u32 tid = (__u32)bpf_get_current_pid_tgid();
  __u64 now = bpf_ktime_get_ns();
  struct device_program_load_seen seen = {.attr = PT_REGS_PARM2_SYSCALL(regs), .ktime_ns = now};
  struct device_program_load_seen *last = bpf_map_lookup_elem(&device_program_loads, &tid);
  /* Measured from the reported check, so back-to-back loads are still reported every
   * window at least. */
  if (last && last->attr == seen.attr && now - last->ktime_ns < LOAD_CHECKS_WINDOW_NS) return 0;
  bpf_map_update_elem(&device_program_loads, &tid, &seen, BPF_ANY);
  struct gdw_device_program_load_event *e = reserve_event(sizeof(*e));
  if (!e) return 0;
  e->header.type = GDW_EVENT_DEVICE_PROGRAM_LOAD;
  e->header.reserved = 0;
  e->header.ktime_ns = bpf_ktime_get_ns();
  fill_process(&e->caller);
  bpf_ringbuf_submit(e, 0);
  return 0;
}

SEC("tp_btf/cap_capable")
int BPF_PROG(gdw_cap_check, const struct cred *cred, struct user_namespace *target_ns,
             const struct user_namespace *capable_ns, int cap, int ret) {
  if (cap != CAP_SYS_ADMIN && cap != CAP_BPF) return 0;
  struct task_struct *task = bpf_get_current_task_btf();
  if (task->flags & (PF_KTHREAD | PF_IO_WORKER)) return 0;
  struct pt_regs *regs = (struct pt_regs *)bpf_task_pt_regs(task);
  if (!regs) return 0;
  long nr = SYSCALL_NR(regs);
  if (cap == CAP_SYS_ADMIN && NR_writev_family(nr)) {
    if (in_compat_syscall(task)) return 0; /* (not loaded at all when rule_writes_at_syscall_exit) */
    /* Refused here, the write fails with EPERM before the rule is parsed: known now.
     * Allowed, the result comes at syscall exit, if the hook is attached to see it. */
    bool refused = ret != 0;
    struct gdw_rule_write_in_flight in_flight = {};
    __u64 ktime = emit_rule_write(task, regs, nr, GDW_SEEN_AT_PERMISSION_CHECK, refused, -EPERM,
                                  &in_flight);
    __u32 tid = (__u32)bpf_get_current_pid_tgid();
    if (ktime && !refused && syscall_hook_attached)
      bpf_map_update_elem(&rule_writes_in_flight, &tid, &in_flight, BPF_ANY);
    else
      bpf_map_delete_elem(&rule_writes_in_flight, &tid);
    return 0;
  }
  /* Only a check that passed: a refused load attaches nothing, and each record makes the
   * daemon re-read every GPU container's programs (v2), which a process without CAP_BPF
   * could otherwise trigger in a loop. bpf_token_capable() falls back from CAP_BPF to
   * CAP_SYS_ADMIN, so either can be the check that lets a load through. */
  if (nr == NR_bpf && ret == 0 && !in_compat_syscall(task)) return emit_device_program_load(regs);
  return 0;
}

/* ---- cgroup lifecycle ------------------------------------------------------------------------- */

static __always_inline int emit_cgroup_event(struct cgroup *cgroup, const char *path, __u32 type) {
  struct gdw_cgroup_event *e = reserve_event(sizeof(*e));
  if (!e) return 0;
  e->header.type = type;
  e->header.reserved = 0;
  e->header.ktime_ns = bpf_ktime_get_ns();
  e->hierarchy_id = BPF_CORE_READ(cgroup, root, hierarchy_id);
  e->level = BPF_CORE_READ(cgroup, level);
  e->cgroup_id = BPF_CORE_READ(cgroup, kn, id);
  /* The kernel formats the path only while the tracepoint has a consumer: we are one. */
  if (bpf_probe_read_kernel_str(e->path, sizeof(e->path), path) < 0) e->path[0] = 0;
  bpf_ringbuf_submit(e, 0);
  return 0;
}

SEC("tp_btf/cgroup_mkdir")
int BPF_PROG(gdw_cg_mkdir, struct cgroup *cgroup, const char *path) {
  return emit_cgroup_event(cgroup, path, GDW_EVENT_CGROUP_MKDIR);
}

SEC("tp_btf/cgroup_rmdir")
int BPF_PROG(gdw_cg_rmdir, struct cgroup *cgroup, const char *path) {
  return emit_cgroup_event(cgroup, path, GDW_EVENT_CGROUP_RMDIR);
}
