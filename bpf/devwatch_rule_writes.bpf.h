/* devwatch (BPF side), cgroup v1 rule writes: a write-family syscall on a devices.allow /
 * devices.deny file, reported at its CAP_SYS_ADMIN check (cap_capable) or whole at syscall
 * exit, and its result at syscall exit. The entry points that call these are in
 * devwatch.bpf.c.
 */
#ifndef GDW_DEVWATCH_RULE_WRITES_BPF_H
#define GDW_DEVWATCH_RULE_WRITES_BPF_H

#include "devwatch_common.bpf.h"

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
  if (ignored_writer_tgid && (bpf_get_current_pid_tgid() >> 32) == ignored_writer_tgid) return 0;
  __u32 deny;
  struct kernfs_node *kn = NULL;
  struct file *file = rule_file(task, regs, &deny, &kn);
  if (!file || (!deny && !report_allow_writes)) return 0;

  struct gdw_rule_write_event *e = reserve_event(sizeof(*e));
  if (!e) return 0;
  begin_writer_record(&e->header, GDW_EVENT_RULE_WRITE, &e->writer);
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

/* The devices controller's write handler returning (fexit/devcgroup_access_write): the
 * file it wrote (`kn`: devices.allow or devices.deny), the rule as the kernel stripped it
 * (`buf`, kernel memory) and the result. Kernels without the cap_capable tracepoint. */
static __always_inline int emit_rule_write_on_write_path(struct kernfs_node *kn, const char *buf, long ret) {
  if (ignored_writer_tgid && (bpf_get_current_pid_tgid() >> 32) == ignored_writer_tgid) return 0;
  const char *name = BPF_CORE_READ(kn, name);
  __u32 deny;
  if (KERNEL_STR_EQUALS(name, "devices.deny"))
    deny = 1;
  else if (KERNEL_STR_EQUALS(name, "devices.allow"))
    deny = 0;
  else
    return 0;
  if (!deny && !report_allow_writes) return 0;
  struct gdw_rule_write_event *e = reserve_event(sizeof(*e));
  if (!e) return 0;
  begin_writer_record(&e->header, GDW_EVENT_RULE_WRITE, &e->writer);
  struct kernfs_node *directory = kernfs_parent(kn);
  e->target_cgroup_id = BPF_CORE_READ(directory, id);
  e->result = ret;
  e->result_known = 1;
  e->seen_at = GDW_SEEN_AT_WRITE_PATH;
  e->deny = deny;
  long copied = bpf_probe_read_kernel_str(e->rule, GDW_RULE_MAX, buf);
  e->rule_len = copied > 0 ? (__u32)(copied - 1) : 0; /* without its NUL */
  bpf_ringbuf_submit(e, rule_write_submit_flags(e->target_cgroup_id, deny));
  return 0;
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

#endif /* GDW_DEVWATCH_RULE_WRITES_BPF_H */
