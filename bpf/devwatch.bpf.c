// SPDX-License-Identifier: GPL-2.0
/* devwatch: who changes device access of cgroups, and which GPU opens were denied.
 *
 * BTF-enabled raw tracepoints (tp_btf), and where the kernel allows them lsm/bpf and fexit
 * programs for the attach hook (no kprobes). Two tiers, because of what they cost
 * everything else on the node:
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
 *  - tp_btf/kmalloc, the attach hook (cgroup v2): an attach of a device program makes the
 *    kernel allocate the cgroup's new effective program array (compute_effective_progs,
 *    under cgroup_mutex). The program first compares the allocation's call site with
 *    those sites (found by gdw_lookup_symbols) and returns for any other kmalloc; at a
 *    site, a bpf() attach of a device program to a watched cgroup is reported. A
 *    capability check during the attach would have been cheaper still, but the kernel
 *    makes none there (only the load checks CAP_BPF). One more site, where a load
 *    allocates its program, reports device program loads by a tenant or systemd: the
 *    attach that follows then finds the daemon awake or just asleep, not 100 ms asleep.
 *  - tp_btf/cgroup_mkdir, tp_btf/cgroup_rmdir.
 *  - tp_btf/sched_process_exit: the writers user space waits for (devwatch_writer_exits.bpf.h).
 *
 *  Attached by user space only when wanted (the "syscall hook"):
 *  - tp_btf/sys_exit, dispatched on the syscall number. The syscall's arguments are still
 *    in pt_regs at exit (x86_64: every register; arm64: x1-x5, and x0 as orig_x0, which
 *    PT_REGS_PARM1_SYSCALL reads) and the outcome is known:
 *     openat, openat2, open: opens that failed with EPERM inside a watched cgroup (see
 *       devwatch_denied_opens.bpf.h): GPU nodes reported, anything else only counted. Any
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
 * Events leave through two ring buffers (denied opens apart, see
 * devwatch_denied_opens.bpf.h); failed reservations are counted per CPU.
 *
 * This file holds the programs (the entry points); what they do is in one header per
 * family, all compiled into this one object: devwatch_common.bpf.h (settings, shared maps
 * and helpers), devwatch_denied_opens.bpf.h, devwatch_rule_writes.bpf.h (cgroup v1) and
 * devwatch_device_programs.bpf.h (cgroup v2).
 */
#include "vmlinux.h"

#include <bpf/bpf_core_read.h>
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_tracing.h>

#include "devwatch_events.h"

char LICENSE[] SEC("license") = "GPL";

#include "devwatch_common.bpf.h"
#include "devwatch_denied_opens.bpf.h"
#include "devwatch_writer_exits.bpf.h"
#include "devwatch_rule_writes.bpf.h"
#include "devwatch_device_programs.bpf.h"

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
#ifdef NR_open
    case NR_open:
      if (ret != -EPERM || in_compat_syscall(bpf_get_current_task_btf())) return 0;
      return emit_denied_open(ret, AT_FDCWD, PT_REGS_PARM1_SYSCALL(regs), (__u32)PT_REGS_PARM2_SYSCALL(regs));
#endif
    case NR_bpf:
      task = bpf_get_current_task_btf();
      return in_compat_syscall(task) ? 0 : emit_device_program(task, regs, ret);
  }
  return 0;
}

/* ---- capability checks (always attached) ---------------------------------------------------- */

SEC("tp_btf/cap_capable")
int BPF_PROG(gdw_cap_check, const struct cred *cred, struct user_namespace *target_ns,
             const struct user_namespace *capable_ns, int cap, int ret) {
  if (cap != CAP_SYS_ADMIN && cap != CAP_BPF) return 0;
  /* The daemon's own grants are most of the rule writes it sees in a storm: nothing about
   * them is reported (nor kept in rule_writes_in_flight), so leave before any map work. */
  if (ignored_writer_tgid && (bpf_get_current_pid_tgid() >> 32) == ignored_writer_tgid) return 0;
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
  if (nr == NR_bpf && ret == 0 && !in_compat_syscall(task)) emit_device_program_load(regs);
  return 0;
}

/* ---- the write path hook (cgroup v1, kernels without cap_capable) ------------------------------ */

/* Where the kernel allows BPF trampolines: every devices.allow / devices.deny write returns
 * through here (kernfs calls it for the file's cftype), and nothing else does. The rule
 * write is reported whole, after the kernel applied it and before the write's inotify
 * event. */
SEC("fexit/devcgroup_access_write")
int BPF_PROG(gdw_fexit_rule_write, struct kernfs_open_file *of, char *buf, size_t nbytes, loff_t off, ssize_t ret) {
  struct task_struct *task = bpf_get_current_task_btf();
  if (task->flags & (PF_KTHREAD | PF_IO_WORKER)) return 0;
  return emit_rule_write_on_write_path(BPF_CORE_READ(of, kn), buf, ret);
}

/* ---- the attach hook (cgroup v2) ---------------------------------------------------------------- */

SEC("tp_btf/kmalloc")
int BPF_PROG(gdw_effective_progs, unsigned long call_site, const void *ptr, size_t bytes_req, size_t bytes_alloc,
             gfp_t gfp_flags, int node) {
  const bool attach_site = at_effective_progs_site(call_site);
  if (!attach_site && !at_program_load_site(call_site)) return 0;
  /* The daemon's own wrappers are loaded and attached here too: nothing to report. */
  if (ignored_writer_tgid && (bpf_get_current_pid_tgid() >> 32) == ignored_writer_tgid) return 0;
  struct task_struct *task = bpf_get_current_task_btf();
  if (task->flags & (PF_KTHREAD | PF_IO_WORKER)) return 0;
  struct pt_regs *regs = (struct pt_regs *)bpf_task_pt_regs(task);
  if (!regs || SYSCALL_NR(regs) != NR_bpf || in_compat_syscall(task)) return 0;
  return attach_site ? emit_device_program_attaching(task, regs) : emit_device_program_load_ahead(regs);
}

/* The attach hook's kinds, cheapest first for the rest of the node; user space attaches
 * the first the kernel allows (daemon/probe/attach_hooks.h) and loads only those it may:
 *  - lsm/bpf: every bpf() call, at its start, where bpf is in the active LSM list. Reads
 *    only cmd and attr, so that it serves security_bpf() with and without its fourth
 *    argument (bool kernel, newer kernels); decides nothing (returns 0). The attach is
 *    not made yet: GDW_EVENT_DEVICE_PROGRAM_AHEAD.
 *  - fexit on cgroup_bpf_prog_attach / cgroup_bpf_link_attach: only cgroup attaches, after
 *    the kernel installed them (a failed one is not reported), where BPF trampolines are
 *    allowed; with an fentry program on bpf_prog_alloc for the loads.
 *  - tp_btf/kmalloc (above): every kmalloc of the node, filtered on its call site. */
static __always_inline bool called_by_someone_else(struct task_struct *task) {
  if (ignored_writer_tgid && (bpf_get_current_pid_tgid() >> 32) == ignored_writer_tgid) return false;
  return !(task->flags & (PF_KTHREAD | PF_IO_WORKER));
}

/* Each kind also reports a device program load by a tenant or systemd ahead of its attach
 * (emit_device_program_load_ahead), from the bpf() call's registers: lsm/bpf at the load's
 * start, the fexit kind with an fentry program where the load allocates its program, the
 * kmalloc kind at that allocation's kmalloc. */
static __always_inline int emit_load_ahead_of(struct task_struct *task) {
  struct pt_regs *regs = (struct pt_regs *)bpf_task_pt_regs(task);
  if (!regs || SYSCALL_NR(regs) != NR_bpf || in_compat_syscall(task)) return 0;
  return emit_device_program_load_ahead(regs);
}

SEC("lsm/bpf")
int BPF_PROG(gdw_lsm_bpf, int cmd, union bpf_attr *attr) {
  if (cmd != BPF_PROG_ATTACH && cmd != BPF_LINK_CREATE && cmd != BPF_PROG_LOAD) return 0;
  struct task_struct *task = bpf_get_current_task_btf();
  if (!called_by_someone_else(task) || in_compat_syscall(task)) return 0;
  if (cmd == BPF_PROG_LOAD) {
    if (report_program_loads) emit_load_ahead_of(task);
    return 0;
  }
  emit_device_program_attach_seen(task, cmd, attr, -1, GDW_EVENT_DEVICE_PROGRAM_AHEAD);
  return 0; /* an LSM program's return is a verdict: never refuse */
}

/* bpf_prog_alloc, not bpf_prog_alloc_no_stats: called from syscall.c, another unit, it is
 * never inlined into the load. Classic BPF (socket filters, seccomp) allocates here too,
 * outside bpf(): left at the syscall number. */
SEC("fentry/bpf_prog_alloc")
int BPF_PROG(gdw_fentry_prog_load, unsigned int size, gfp_t gfp_extra_flags) {
  if (!report_program_loads) return 0;
  struct task_struct *task = bpf_get_current_task_btf();
  if (!called_by_someone_else(task)) return 0;
  return emit_load_ahead_of(task);
}

SEC("fexit/cgroup_bpf_prog_attach")
int BPF_PROG(gdw_fexit_prog_attach, const union bpf_attr *attr, enum bpf_prog_type ptype, struct bpf_prog *prog,
             int ret) {
  if (ret != 0) return 0;
  struct task_struct *task = bpf_get_current_task_btf();
  if (!called_by_someone_else(task)) return 0;
  return emit_device_program_attach_seen(task, BPF_PROG_ATTACH, attr, 0, GDW_EVENT_DEVICE_PROGRAM_ATTACHING);
}

SEC("fexit/cgroup_bpf_link_attach")
int BPF_PROG(gdw_fexit_link_attach, const union bpf_attr *attr, struct bpf_prog *prog, int ret) {
  if (ret < 0) return 0;
  struct task_struct *task = bpf_get_current_task_btf();
  if (!called_by_someone_else(task)) return 0;
  return emit_device_program_attach_seen(task, BPF_LINK_CREATE, attr, ret, GDW_EVENT_DEVICE_PROGRAM_ATTACHING);
}

/* Run once by user space after load (BPF_PROG_TEST_RUN): the attach hook's call sites. */
const char site_compute[] = "compute_effective_progs";
const char site_update[] = "update_effective_progs";
const char site_alloc[] = "bpf_prog_array_alloc";
const char site_load[] = "bpf_prog_alloc_no_stats";

SEC("syscall")
int gdw_lookup_symbols(void *ctx) {
  bpf_kallsyms_lookup_name(site_compute, sizeof(site_compute), 0, &effective_progs_sites[0]);
  bpf_kallsyms_lookup_name(site_update, sizeof(site_update), 0, &effective_progs_sites[1]);
  bpf_kallsyms_lookup_name(site_alloc, sizeof(site_alloc), 0, &effective_progs_sites[2]);
  bpf_kallsyms_lookup_name(site_load, sizeof(site_load), 0, &program_load_site);
  return 0;
}

/* ---- cgroup lifecycle ------------------------------------------------------------------------- */

static __always_inline int emit_cgroup_event(struct cgroup *cgroup, const char *path, __u32 type) {
  struct gdw_cgroup_event *e = reserve_event(sizeof(*e));
  if (!e) return 0;
  e->header.type = type;
  e->header.reserved = 0;
  e->header.ktime_ns = bpf_ktime_get_ns();
  fill_process(&e->caller);
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

/* Every thread exit on the node passes here: one hash lookup unless it is a writer user
 * space waits for. One program serves the kernels whose tracepoint also passes group_dead
 * (6.16+): only the task is read. */
SEC("tp_btf/sched_process_exit")
int BPF_PROG(gdw_process_exit, struct task_struct *task) {
  return report_awaited_exit(task);
}
