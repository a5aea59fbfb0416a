/* devwatch (BPF side), cgroup v2 device programs: attaches of BPF_CGROUP_DEVICE programs
 * to watched cgroups seen inside the kernel while it installs them (the attach hook, at the
 * allocation of the cgroup's new effective program array), attach / detach / replace of
 * programs and links seen at bpf() exit (the syscall hook), and loads of such programs
 * seen at their CAP_BPF check (where the attach hook cannot be used) or by the attach
 * hook ahead of the attach. The entry points that call these are in devwatch.bpf.c.
 */
#ifndef GDW_DEVWATCH_DEVICE_PROGRAMS_BPF_H
#define GDW_DEVWATCH_DEVICE_PROGRAMS_BPF_H

#include "devwatch_common.bpf.h"

#define ATTR_PREFIX_SIZE 20           /* union bpf_attr bytes we read: up to replace_bpf_fd */
#define BPF_F_REPLACE_FLAG (1U << 2) /* BPF_F_REPLACE is a #define in UAPI, not in BTF */

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

/* What one bpf() call did to a BPF_CGROUP_DEVICE program or link, decoded from its attr. */
struct device_program_change {
  __u32 command; /* GDW_DEVPROG_* */
  __u32 flags;
  __u32 prog_id;
  __u32 replaced_prog_id;
  __u64 target_cgroup_id;
};

/* Cgroups whose device program attaches the attach hook reports (the GPU containers' and
 * crun's sub-cgroups of them): written by user space, so that an attach anywhere else
 * costs the daemon nothing. */
struct {
  __uint(type, BPF_MAP_TYPE_HASH);
  __uint(max_entries, 16384);
  __type(key, __u64);
  __type(value, __u8);
} program_cgroups SEC(".maps");

/* The attach hook's call sites (function starts, 0: unknown): written once after load by
 * gdw_lookup_symbols, read on every kmalloc (a load, no helper call). */
__u64 effective_progs_sites[GDW_EFFECTIVE_PROGS_SITES];
/* Where bpf(BPF_PROG_LOAD) allocates the new program (bpf_prog_alloc_no_stats, its aux):
 * looked up with the sites above; 0: unknown. The kmalloc attach hook reports a device
 * program load there, before the verifier runs (emit_device_program_load_ahead). */
__u64 program_load_site;
/* Written by user space: device program loads are reported. Without the attach hook they
 * stand for the attaches it would report; with it (each kind has a load point), they wake
 * the daemon ahead of the attach that normally follows (its event loop and the vCPU it
 * runs on are warm then). */
volatile bool report_program_loads = true;

static __always_inline bool is_device_program_command(int cmd) {
  return cmd == BPF_PROG_ATTACH || cmd == BPF_PROG_DETACH || cmd == BPF_LINK_CREATE ||
         cmd == BPF_LINK_UPDATE || cmd == BPF_LINK_DETACH;
}

/* The bpf() call's attr, zeroed past what we read; 0 on success. */
static __always_inline long read_attr_prefix(struct pt_regs *regs, union bpf_attr *attr) {
  /* The caller's size may be smaller than the prefix we read; fields past it count as
   * zero (the bpf(2) contract). */
  __builtin_memset(attr, 0, sizeof(*attr));
  __u64 size = PT_REGS_PARM3_SYSCALL(regs);
  if (size > ATTR_PREFIX_SIZE) size = ATTR_PREFIX_SIZE;
  return bpf_probe_read_user(attr, size, (void *)PT_REGS_PARM2_SYSCALL(regs));
}

/* BPF_PROG_ATTACH / BPF_PROG_DETACH; false when not a device program. */
static __always_inline bool decode_prog_attach(struct task_struct *task, int cmd, union bpf_attr *attr,
                                               struct device_program_change *change) {
  if (attr->attach_type != BPF_CGROUP_DEVICE) return false;
  change->command = cmd == BPF_PROG_ATTACH ? GDW_DEVPROG_PROG_ATTACH : GDW_DEVPROG_PROG_DETACH;
  change->target_cgroup_id = cgroup_id_of_fd(task, attr->target_fd);
  change->prog_id = prog_id_of_fd(task, attr->attach_bpf_fd);
  change->flags = attr->attach_flags;
  if (cmd == BPF_PROG_ATTACH && (attr->attach_flags & BPF_F_REPLACE_FLAG))
    change->replaced_prog_id = prog_id_of_fd(task, attr->replace_bpf_fd);
  return true;
}

/* BPF_LINK_CREATE; remembers the new link (ret: its fd) for its later update / detach. */
static __always_inline bool decode_link_create(struct task_struct *task, union bpf_attr *attr, long ret,
                                               struct device_program_change *change) {
  if (attr->link_create.attach_type != BPF_CGROUP_DEVICE) return false;
  change->command = GDW_DEVPROG_LINK_CREATE;
  change->target_cgroup_id = cgroup_id_of_fd(task, attr->link_create.target_fd);
  change->prog_id = prog_id_of_fd(task, attr->link_create.prog_fd);
  change->flags = attr->link_create.flags;
  struct bpf_link *link = ret >= 0 ? link_of_fd(task, ret) : NULL; /* ret: the new link's fd */
  if (link) {
    __u32 link_id = BPF_CORE_READ(link, id);
    struct gdw_device_link remembered = {.cgroup_id = change->target_cgroup_id, .prog_id = change->prog_id};
    bpf_map_update_elem(&cgroup_device_links, &link_id, &remembered, BPF_ANY);
  }
  return true;
}

/* BPF_LINK_UPDATE / BPF_LINK_DETACH of a device program link; keeps cgroup_device_links
 * in step with what succeeded. */
static __always_inline bool decode_link_change(struct task_struct *task, int cmd, union bpf_attr *attr,
                                               long ret, struct device_program_change *change) {
  __u32 link_fd = cmd == BPF_LINK_UPDATE ? attr->link_update.link_fd : attr->link_detach.link_fd;
  struct bpf_link *link = link_of_fd(task, link_fd);
  if (!link || BPF_CORE_READ(link, type) != BPF_LINK_TYPE_CGROUP ||
      cgroup_link_attach_type(link) != BPF_CGROUP_DEVICE)
    return false;
  __u32 link_id = BPF_CORE_READ(link, id);
  struct gdw_device_link *remembered = bpf_map_lookup_elem(&cgroup_device_links, &link_id);
  struct cgroup *cgroup = BPF_CORE_READ(container_of(link, struct bpf_cgroup_link, link), cgroup);
  /* NULL once the detach succeeded. */
  change->target_cgroup_id = cgroup ? BPF_CORE_READ(cgroup, kn, id) : remembered ? remembered->cgroup_id : 0;
  __u32 link_prog_id = BPF_CORE_READ(link, prog, aux, id);
  if (cmd == BPF_LINK_UPDATE) {
    change->command = GDW_DEVPROG_LINK_UPDATE;
    change->prog_id = prog_id_of_fd(task, attr->link_update.new_prog_fd);
    change->flags = attr->link_update.flags;
    if (remembered)
      change->replaced_prog_id = remembered->prog_id;
    else if (change->flags & BPF_F_REPLACE_FLAG)
      change->replaced_prog_id = prog_id_of_fd(task, attr->link_update.old_prog_fd);
    else if (ret != 0)
      change->replaced_prog_id = link_prog_id; /* the failed update left it in place */
    if (ret == 0) {
      struct gdw_device_link updated = {.cgroup_id = change->target_cgroup_id, .prog_id = link_prog_id};
      bpf_map_update_elem(&cgroup_device_links, &link_id, &updated, BPF_ANY);
    }
  } else {
    change->command = GDW_DEVPROG_LINK_DETACH;
    change->prog_id = link_prog_id;
    if (ret == 0) bpf_map_delete_elem(&cgroup_device_links, &link_id);
  }
  return true;
}

static __always_inline void submit_device_program_event(const struct device_program_change *change, long ret,
                                                        __u32 type) {
  struct gdw_device_program_event *e = reserve_event(sizeof(*e));
  if (!e) return;
  begin_writer_record(&e->header, type, &e->caller);
  e->command = change->command;
  e->flags = change->flags;
  e->prog_id = change->prog_id;
  e->replaced_prog_id = change->replaced_prog_id;
  e->target_cgroup_id = change->target_cgroup_id;
  e->result = ret;
  bpf_ringbuf_submit(e, 0);
}

static __always_inline int emit_device_program(struct task_struct *task, struct pt_regs *regs, long ret) {
  int cmd = (int)PT_REGS_PARM1_SYSCALL(regs);
  if (!is_device_program_command(cmd)) return 0;
  union bpf_attr attr;
  if (read_attr_prefix(regs, &attr) != 0) return 0;
  struct device_program_change change = {};
  bool device;
  if (cmd == BPF_PROG_ATTACH || cmd == BPF_PROG_DETACH)
    device = decode_prog_attach(task, cmd, &attr, &change);
  else if (cmd == BPF_LINK_CREATE)
    device = decode_link_create(task, &attr, ret, &change);
  else
    device = decode_link_change(task, cmd, &attr, ret, &change);
  if (device) submit_device_program_event(&change, ret, GDW_EVENT_DEVICE_PROGRAM);
  return 0;
}

static __always_inline bool at_program_load_site(__u64 call_site) {
  return program_load_site && call_site - program_load_site < GDW_SITE_SPAN;
}

static __always_inline bool at_effective_progs_site(__u64 call_site) {
  _Pragma("unroll") for (int i = 0; i < GDW_EFFECTIVE_PROGS_SITES; i++) {
    __u64 site = effective_progs_sites[i];
    if (site && call_site - site < GDW_SITE_SPAN) return true;
  }
  return false;
}

/* The attach hook, inside bpf(BPF_PROG_ATTACH / BPF_LINK_CREATE) of a device program to a
 * watched cgroup: reported before the kernel has decided, while the attacher holds
 * cgroup_mutex (see GDW_EVENT_DEVICE_PROGRAM_ATTACHING). A cgroup with descendants has an
 * array computed for each, so one attach can be reported more than once. */
static __always_inline int emit_device_program_attaching(struct task_struct *task, struct pt_regs *regs) {
  int cmd = (int)PT_REGS_PARM1_SYSCALL(regs);
  if (cmd != BPF_PROG_ATTACH && cmd != BPF_LINK_CREATE) return 0; /* a detach cannot revoke */
  union bpf_attr attr;
  if (read_attr_prefix(regs, &attr) != 0) return 0;
  struct device_program_change change = {};
  bool device = cmd == BPF_PROG_ATTACH ? decode_prog_attach(task, cmd, &attr, &change)
                                       : decode_link_create(task, &attr, -1, &change);
  if (!device || !bpf_map_lookup_elem(&program_cgroups, &change.target_cgroup_id)) return 0;
  submit_device_program_event(&change, 0, GDW_EVENT_DEVICE_PROGRAM_ATTACHING);
  return 0;
}

/* The attach hook's other kinds (lsm/bpf, fexit on the cgroup attach path): the bpf()
 * call's attr as the kernel copied it (`kattr`, a kernel address), `cmd` BPF_PROG_ATTACH or
 * BPF_LINK_CREATE (`ret`: the new link's fd, or -1 before the call made one). */
static __always_inline int emit_device_program_attach_seen(struct task_struct *task, int cmd, const void *kattr,
                                                           long ret, __u32 type) {
  union bpf_attr attr;
  __builtin_memset(&attr, 0, sizeof(attr));
  if (bpf_probe_read_kernel(&attr, ATTR_PREFIX_SIZE, kattr) != 0) return 0;
  struct device_program_change change = {};
  bool device = cmd == BPF_PROG_ATTACH ? decode_prog_attach(task, cmd, &attr, &change)
                                       : decode_link_create(task, &attr, ret, &change);
  if (!device || !bpf_map_lookup_elem(&program_cgroups, &change.target_cgroup_id)) return 0;
  submit_device_program_event(&change, 0, type);
  return 0;
}

/* A bpf(BPF_PROG_LOAD) of a cgroup device program, seen at a capability check that passed
 * (gdw_cap_check) or by the attach hook; the record's time when reported, else 0. */
static __always_inline __u64 emit_device_program_load(struct pt_regs *regs) {
  if (!report_program_loads || (int)PT_REGS_PARM1_SYSCALL(regs) != BPF_PROG_LOAD) return 0;
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
  const __u64 reported = e->header.ktime_ns;
  bpf_ringbuf_submit(e, 0);
  return reported;
}

/* A load reported ahead only wakes the daemon, so one such wake an interval is enough,
 * whoever loads: a tenant with CAP_BPF loading in a loop (from many threads, or attrs,
 * which the per-thread window above does not catch) wakes it 1000 times a second at
 * most, and a systemd reload's burst of loads once. The attaches are reported all the
 * same. Shared by every CPU without a lock: two CPUs may both report once. */
#define LOAD_AHEAD_INTERVAL_NS (1000 * 1000ULL)
__u64 load_ahead_reported_ns;

/* A load seen by the attach hook (lsm/bpf at its start; fentry on, or the kmalloc at,
 * the allocation of its program), only from where the attach that follows is answered
 * at once: inside a watched cgroup (a tenant attaching to its own) or the init process
 * (systemd re-applying a scope). A runtime's is not: its attach is waited on until it
 * exits anyway. Nor anyone else's, which would only wake the daemon for nothing. */
static __always_inline int emit_device_program_load_ahead(struct pt_regs *regs) {
  __u64 cgroup_id = bpf_get_current_cgroup_id();
  if ((bpf_get_current_pid_tgid() >> 32) != 1 && !bpf_map_lookup_elem(&program_cgroups, &cgroup_id)) return 0;
  if (bpf_ktime_get_ns() - load_ahead_reported_ns < LOAD_AHEAD_INTERVAL_NS) return 0;
  const __u64 reported = emit_device_program_load(regs); /* the interval runs from the record's time */
  if (reported) load_ahead_reported_ns = reported;
  return 0;
}

#endif /* GDW_DEVWATCH_DEVICE_PROGRAMS_BPF_H */
