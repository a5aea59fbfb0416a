// SPDX-License-Identifier: GPL-2.0
/* devwatch: who changes device access of cgroups, and which GPU opens were denied.
 *
 * BTF-enabled raw tracepoints only (tp_btf; no kprobes/fentry, which not every kernel we
 * run on allows):
 *  - tp_btf/sys_enter + tp_btf/sys_exit, dispatched on the syscall number:
 *     write, pwrite64, writev, pwritev, pwritev2: writes to a cgroup v1 devices.allow /
 *       devices.deny. The file is recognised at entry from the fd; the rule text and the
 *       result are taken at exit, when the kernel has already faulted the buffer in.
 *     openat, openat2, open: opens that failed with EPERM inside a watched cgroup (see
 *       "Denied opens" below).
 *     bpf: attach/detach/replace of BPF_CGROUP_DEVICE programs (cgroup v2 device rules).
 *  - tp_btf/cgroup_mkdir, tp_btf/cgroup_rmdir.
 *
 * Why not the per-syscall tracepoints (tracepoint/syscalls/sys_enter_write ...): on the
 * 6.18 kernel this was built on, each hit of a perf syscall tracepoint costs ~450 ns even
 * with an empty program (write() to /dev/null: 250 -> 900 ns), while the raw sys_enter /
 * sys_exit tracepoints cost a few ns per syscall. They also need tracefs mounted to find
 * tracepoint ids; tp_btf attaches by BTF id.
 *
 * Enter and exit are paired per thread through LRU hash maps keyed by tid; each pending
 * entry remembers its syscall number so an exit never completes another syscall's entry.
 * Everything leaves through one ring buffer; failed reservations are counted per CPU.
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
/* thread_info.status bit of a task inside an ia32 syscall, whose numbers and argument
 * registers differ (the syscalls/ tracepoints skip those too). */
#define TS_COMPAT 0x0002
#define SYSCALL_NR(regs) ((long)(regs)->orig_ax)
#else
#error "devwatch.bpf.c: syscall numbers are only defined for x86_64"
#endif

#define CGROUP_SUPER_MAGIC 0x27e0eb
#define CGROUP2_SUPER_MAGIC 0x63677270
#define EPERM 1
#define AT_FDCWD -100
#define ATTR_PREFIX_SIZE 20
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

/* ---- maps shared with user space ------------------------------------------------------ */

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

/* Cgroup ids (v2 ids and v1 devices cgroup ids share the kernfs id space of their own
 * hierarchy; a collision only widens the filter) whose denied opens are reported. */
struct {
  __uint(type, BPF_MAP_TYPE_HASH);
  __uint(max_entries, 16384);
  __type(key, __u64);
  __type(value, __u8);
} watched_cgroups SEC(".maps");

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

/* Kept in step with watched_cgroups by user space: lets every open of an unwatched
 * system skip the map lookups. */
__u32 watched_cgroup_count = 0;

/* ---- enter/exit pairing ----------------------------------------------------------------- */

struct pending_rule_write {
  __u64 ktime_ns;
  __u64 target_cgroup_id;
  __u64 buf; /* user buffer, or the iovec array for the vectored syscalls */
  __u64 count;
  __s64 syscall_nr;
  __u32 deny;
  __u32 vectored;
};

struct pending_open {
  __u64 ktime_ns;
  __u64 filename;
  __s64 syscall_nr;
  __s32 dfd;
  __u32 flags;
};

struct pending_device_program {
  __u64 ktime_ns;
  __u64 target_cgroup_id;
  __u32 command;
  __u32 flags;
  __u32 prog_id;
  __u32 replaced_prog_id;
};

struct {
  __uint(type, BPF_MAP_TYPE_LRU_HASH);
  __uint(max_entries, 1024);
  __type(key, __u32);
  __type(value, struct pending_rule_write);
} pending_rule_writes SEC(".maps");

struct {
  __uint(type, BPF_MAP_TYPE_LRU_HASH);
  __uint(max_entries, 4096);
  __type(key, __u32);
  __type(value, struct pending_open);
} pending_opens SEC(".maps");

struct {
  __uint(type, BPF_MAP_TYPE_LRU_HASH);
  __uint(max_entries, 256);
  __type(key, __u32);
  __type(value, struct pending_device_program);
} pending_device_programs SEC(".maps");

/* Entries stashed and not yet collected. Every write()/open() on the machine passes the
 * exit tracepoint; while nothing is pending (the usual case) it returns before touching
 * the hash map. An entry lost to LRU eviction only keeps the shortcut off. */
__u64 rule_writes_in_flight = 0;
__u64 opens_in_flight = 0;

/* ---- helpers ------------------------------------------------------------------------------- */

static __always_inline void *reserve_event(__u64 size) {
  void *event = bpf_ringbuf_reserve(&events, size, 0);
  if (!event) {
    __u32 zero = 0;
    __u64 *drops = bpf_map_lookup_elem(&ring_buffer_drops, &zero);
    if (drops) *drops += 1; /* per-CPU value: no atomic needed */
  }
  return event;
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
}

/* current->files->fdt->fd[fd], NULL when out of range. */
static __always_inline struct file *file_of_fd(__u64 fd_arg) {
  __u32 fd = (__u32)fd_arg;
  struct task_struct *task = (struct task_struct *)bpf_get_current_task();
  struct fdtable *fdt = BPF_CORE_READ(task, files, fdt);
  if (!fdt || fd >= BPF_CORE_READ(fdt, max_fds)) return NULL;
  struct file **fds = BPF_CORE_READ(fdt, fd);
  struct file *file = NULL;
  bpf_probe_read_kernel(&file, sizeof(file), &fds[fd]);
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

static __always_inline __u32 prog_id_of_fd(__u64 fd) {
  struct file *file = file_of_fd(fd);
  if (!file || !KERNEL_STR_EQUALS(file_dentry_name(file), "bpf-prog")) return 0;
  struct bpf_prog *prog = BPF_CORE_READ(file, private_data);
  return BPF_CORE_READ(prog, aux, id);
}

static __always_inline struct bpf_link *link_of_fd(__u64 fd) {
  struct file *file = file_of_fd(fd);
  if (!file || !KERNEL_STR_EQUALS(file_dentry_name(file), "bpf_link")) return NULL;
  return BPF_CORE_READ(file, private_data);
}

/* A cgroup directory fd (v1 or v2) → its kernfs id, which is the cgroup id. */
static __always_inline __u64 cgroup_id_of_fd(__u64 fd) {
  struct file *file = file_of_fd(fd);
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

static __always_inline int stash_rule_write(struct pt_regs *regs, long syscall_nr, __u32 vectored) {
  struct file *file = file_of_fd(PT_REGS_PARM1_SYSCALL(regs));
  if (!file) return 0;
  struct inode *inode = BPF_CORE_READ(file, f_inode);
  if (BPF_CORE_READ(inode, i_sb, s_magic) != CGROUP_SUPER_MAGIC) return 0;
  /* A kernfs inode's i_private is its kernfs_node; the node's name is the file name. */
  struct kernfs_node *kn = BPF_CORE_READ(inode, i_private);
  const char *name = BPF_CORE_READ(kn, name);
  __u32 deny;
  if (KERNEL_STR_EQUALS(name, "devices.deny"))
    deny = 1;
  else if (KERNEL_STR_EQUALS(name, "devices.allow"))
    deny = 0;
  else
    return 0;

  /* The cgroup is the directory holding the file; its kernfs id is the cgroup id. */
  struct kernfs_node *directory = kernfs_parent(kn);
  struct pending_rule_write pending = {
      .ktime_ns = bpf_ktime_get_ns(),
      .target_cgroup_id = BPF_CORE_READ(directory, id),
      .buf = PT_REGS_PARM2_SYSCALL(regs),
      .count = PT_REGS_PARM3_SYSCALL(regs),
      .syscall_nr = syscall_nr,
      .deny = deny,
      .vectored = vectored,
  };
  __u32 tid = (__u32)bpf_get_current_pid_tgid();
  if (bpf_map_update_elem(&pending_rule_writes, &tid, &pending, BPF_ANY) == 0)
    __sync_fetch_and_add(&rule_writes_in_flight, 1);
  return 0;
}

static __always_inline int emit_rule_write(long syscall_nr, long ret) {
  if (!rule_writes_in_flight) return 0;
  __u32 tid = (__u32)bpf_get_current_pid_tgid();
  struct pending_rule_write *found = bpf_map_lookup_elem(&pending_rule_writes, &tid);
  if (!found) return 0;
  struct pending_rule_write pending = *found;
  if (bpf_map_delete_elem(&pending_rule_writes, &tid) == 0)
    __sync_fetch_and_add(&rule_writes_in_flight, -1);
  if (pending.syscall_nr != syscall_nr) return 0;

  struct gdw_rule_write_event *e = reserve_event(sizeof(*e));
  if (!e) return 0;
  e->header.type = GDW_EVENT_RULE_WRITE;
  e->header.reserved = 0;
  e->header.ktime_ns = pending.ktime_ns;
  fill_process(&e->writer);
  e->target_cgroup_id = pending.target_cgroup_id;
  e->result = ret;
  e->deny = pending.deny;

  __u64 buf = pending.buf;
  __u64 count = pending.count;
  if (pending.vectored) {
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
  bpf_ringbuf_submit(e, 0);
  return 0;
}

/* ---- denied opens ----------------------------------------------------------------------------
 *
 * Filtering, in order:
 *  1. entry: nothing at all unless watched_cgroup_count != 0; then only tasks whose v2
 *     cgroup id (bpf_get_current_cgroup_id) or v1 devices cgroup id is in watched_cgroups
 *     stash {dfd, filename pointer, flags};
 *  2. exit: only a result of exactly -EPERM goes on;
 *  3. the path string, read at exit, is looked up in watched_paths (filled by user space
 *     with the GPU node paths it knows, e.g. "/dev/nvidia0"). Found: the device number
 *     comes from the map and the event is kept only if its major is in watched_majors.
 *     Not found: the event leaves with 0:0 and user space decides (it stats the path in
 *     the opener's root; see daemon/probe). No syscall tracepoint sees the inode of a
 *     failed open, and this kernel has no tracepoint on the permission path, so the path
 *     string is the only in-kernel handle on the device.
 */

static __always_inline int stash_open(long syscall_nr, __s32 dfd, __u64 filename, __u32 flags) {
  if (!watched_cgroup_count) return 0;
  __u64 cgroup_id = bpf_get_current_cgroup_id();
  if (!bpf_map_lookup_elem(&watched_cgroups, &cgroup_id)) {
    __u64 devices_id = devices_cgroup_id((struct task_struct *)bpf_get_current_task());
    if (!devices_id || !bpf_map_lookup_elem(&watched_cgroups, &devices_id)) return 0;
  }
  struct pending_open pending = {
      .ktime_ns = bpf_ktime_get_ns(),
      .filename = filename,
      .syscall_nr = syscall_nr,
      .dfd = dfd,
      .flags = flags,
  };
  __u32 tid = (__u32)bpf_get_current_pid_tgid();
  if (bpf_map_update_elem(&pending_opens, &tid, &pending, BPF_ANY) == 0)
    __sync_fetch_and_add(&opens_in_flight, 1);
  return 0;
}

static __always_inline int emit_denied_open(long syscall_nr, long ret) {
  if (!opens_in_flight) return 0;
  __u32 tid = (__u32)bpf_get_current_pid_tgid();
  struct pending_open *found = bpf_map_lookup_elem(&pending_opens, &tid);
  if (!found) return 0;
  struct pending_open pending = *found;
  if (bpf_map_delete_elem(&pending_opens, &tid) == 0) __sync_fetch_and_add(&opens_in_flight, -1);
  if (pending.syscall_nr != syscall_nr || ret != -EPERM) return 0;

  struct gdw_denied_open_event *e = reserve_event(sizeof(*e));
  if (!e) return 0;
  __builtin_memset(e->path, 0, sizeof(e->path)); /* the path is also a hash key */
  bpf_probe_read_user_str(e->path, sizeof(e->path), (void *)pending.filename);
  struct gdw_device_number *device = bpf_map_lookup_elem(&watched_paths, e->path);
  if (device) {
    __u32 major = device->major;
    if (!bpf_map_lookup_elem(&watched_majors, &major)) {
      bpf_ringbuf_discard(e, 0);
      return 0;
    }
    e->major = major;
    e->minor = device->minor;
  } else {
    e->major = 0;
    e->minor = 0;
  }
  e->header.type = GDW_EVENT_DENIED_OPEN;
  e->header.reserved = 0;
  e->header.ktime_ns = pending.ktime_ns;
  fill_process(&e->opener);
  e->dfd = pending.dfd;
  e->flags = pending.flags;
  bpf_ringbuf_submit(e, 0);
  return 0;
}

/* ---- cgroup v2 device programs ------------------------------------------------------------ */

static __always_inline int stash_device_program(struct pt_regs *regs) {
  int cmd = (int)PT_REGS_PARM1_SYSCALL(regs);
  if (cmd != BPF_PROG_ATTACH && cmd != BPF_PROG_DETACH && cmd != BPF_LINK_CREATE &&
      cmd != BPF_LINK_UPDATE && cmd != BPF_LINK_DETACH)
    return 0;

  /* The attr prefixes we need end at byte 20 (replace_bpf_fd); the caller's size may be
   * smaller, fields past it count as zero (the bpf(2) contract). */
  union bpf_attr attr;
  __builtin_memset(&attr, 0, sizeof(attr));
  __u64 size = PT_REGS_PARM3_SYSCALL(regs);
  if (size > ATTR_PREFIX_SIZE) size = ATTR_PREFIX_SIZE;
  if (bpf_probe_read_user(&attr, size, (void *)PT_REGS_PARM2_SYSCALL(regs)) != 0) return 0;

  struct pending_device_program pending = {.ktime_ns = bpf_ktime_get_ns()};
  if (cmd == BPF_PROG_ATTACH || cmd == BPF_PROG_DETACH) {
    if (attr.attach_type != BPF_CGROUP_DEVICE) return 0;
    pending.command = cmd == BPF_PROG_ATTACH ? GDW_DEVPROG_PROG_ATTACH : GDW_DEVPROG_PROG_DETACH;
    pending.target_cgroup_id = cgroup_id_of_fd(attr.target_fd);
    pending.prog_id = prog_id_of_fd(attr.attach_bpf_fd);
    pending.flags = attr.attach_flags;
    if (cmd == BPF_PROG_ATTACH && (attr.attach_flags & BPF_F_REPLACE_FLAG))
      pending.replaced_prog_id = prog_id_of_fd(attr.replace_bpf_fd);
  } else if (cmd == BPF_LINK_CREATE) {
    if (attr.link_create.attach_type != BPF_CGROUP_DEVICE) return 0;
    pending.command = GDW_DEVPROG_LINK_CREATE;
    pending.target_cgroup_id = cgroup_id_of_fd(attr.link_create.target_fd);
    pending.prog_id = prog_id_of_fd(attr.link_create.prog_fd);
    pending.flags = attr.link_create.flags;
  } else {
    __u32 link_fd = cmd == BPF_LINK_UPDATE ? attr.link_update.link_fd : attr.link_detach.link_fd;
    struct bpf_link *link = link_of_fd(link_fd);
    if (!link || BPF_CORE_READ(link, type) != BPF_LINK_TYPE_CGROUP ||
        cgroup_link_attach_type(link) != BPF_CGROUP_DEVICE)
      return 0;
    struct cgroup *cgroup = BPF_CORE_READ(container_of(link, struct bpf_cgroup_link, link), cgroup);
    pending.target_cgroup_id = cgroup ? BPF_CORE_READ(cgroup, kn, id) : 0;
    __u32 current_prog_id = BPF_CORE_READ(link, prog, aux, id);
    if (cmd == BPF_LINK_UPDATE) {
      pending.command = GDW_DEVPROG_LINK_UPDATE;
      pending.prog_id = prog_id_of_fd(attr.link_update.new_prog_fd);
      pending.replaced_prog_id = current_prog_id;
      pending.flags = attr.link_update.flags;
    } else {
      pending.command = GDW_DEVPROG_LINK_DETACH;
      pending.prog_id = current_prog_id;
    }
  }
  __u32 tid = (__u32)bpf_get_current_pid_tgid();
  bpf_map_update_elem(&pending_device_programs, &tid, &pending, BPF_ANY);
  return 0;
}

static __always_inline int emit_device_program(long ret) {
  __u32 tid = (__u32)bpf_get_current_pid_tgid();
  struct pending_device_program *found = bpf_map_lookup_elem(&pending_device_programs, &tid);
  if (!found) return 0;
  struct pending_device_program pending = *found;
  bpf_map_delete_elem(&pending_device_programs, &tid);

  struct gdw_device_program_event *e = reserve_event(sizeof(*e));
  if (!e) return 0;
  e->header.type = GDW_EVENT_DEVICE_PROGRAM;
  e->header.reserved = 0;
  e->header.ktime_ns = pending.ktime_ns;
  fill_process(&e->caller);
  e->command = pending.command;
  e->flags = pending.flags;
  e->prog_id = pending.prog_id;
  e->replaced_prog_id = pending.replaced_prog_id;
  e->target_cgroup_id = pending.target_cgroup_id;
  e->result = ret;
  bpf_ringbuf_submit(e, 0);
  return 0;
}

/* ---- syscall dispatch ---------------------------------------------------------------------- */

static __always_inline bool in_compat_syscall(void) {
  struct task_struct *task = bpf_get_current_task_btf();
  return bpf_core_field_exists(struct thread_info, status) && (task->thread_info.status & TS_COMPAT);
}

/* Runs for every syscall on the machine: the switch is all most of them see. */
SEC("tp_btf/sys_enter")
int BPF_PROG(syscall_enter, struct pt_regs *regs, long syscall_nr) {
  switch (syscall_nr) {
    case NR_write:
    case NR_pwrite64:
      return in_compat_syscall() ? 0 : stash_rule_write(regs, syscall_nr, 0);
    case NR_writev:
    case NR_pwritev:
    case NR_pwritev2:
      return in_compat_syscall() ? 0 : stash_rule_write(regs, syscall_nr, 1);
    case NR_openat:
      if (in_compat_syscall()) return 0;
      return stash_open(syscall_nr, (__s32)PT_REGS_PARM1_SYSCALL(regs), PT_REGS_PARM2_SYSCALL(regs),
                        (__u32)PT_REGS_PARM3_SYSCALL(regs));
    case NR_openat2: {
      if (in_compat_syscall()) return 0;
      __u64 flags = 0; /* open_how.flags is the first member */
      bpf_probe_read_user(&flags, sizeof(flags), (void *)PT_REGS_PARM3_SYSCALL(regs));
      return stash_open(syscall_nr, (__s32)PT_REGS_PARM1_SYSCALL(regs), PT_REGS_PARM2_SYSCALL(regs),
                        (__u32)flags);
    }
    case NR_open:
      if (in_compat_syscall()) return 0;
      return stash_open(syscall_nr, AT_FDCWD, PT_REGS_PARM1_SYSCALL(regs), (__u32)PT_REGS_PARM2_SYSCALL(regs));
    case NR_bpf:
      return in_compat_syscall() ? 0 : stash_device_program(regs);
  }
  return 0;
}

/* Compat syscalls never stash, so their exits find nothing pending. */
SEC("tp_btf/sys_exit")
int BPF_PROG(syscall_exit, struct pt_regs *regs, long ret) {
  long syscall_nr = SYSCALL_NR(regs);
  switch (syscall_nr) {
    case NR_write:
    case NR_pwrite64:
    case NR_writev:
    case NR_pwritev:
    case NR_pwritev2:
      return emit_rule_write(syscall_nr, ret);
    case NR_openat:
    case NR_openat2:
    case NR_open:
      return emit_denied_open(syscall_nr, ret);
    case NR_bpf:
      return emit_device_program(ret);
  }
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
int BPF_PROG(cgroup_mkdir, struct cgroup *cgroup, const char *path) {
  return emit_cgroup_event(cgroup, path, GDW_EVENT_CGROUP_MKDIR);
}

SEC("tp_btf/cgroup_rmdir")
int BPF_PROG(cgroup_rmdir, struct cgroup *cgroup, const char *path) {
  return emit_cgroup_event(cgroup, path, GDW_EVENT_CGROUP_RMDIR);
}
