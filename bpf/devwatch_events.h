/* Records the devwatch BPF programs put into their ring buffer, and the keys/values of
 * the maps user space fills. Shared by bpf/devwatch.bpf.c (types from vmlinux.h) and
 * daemon/probe (types from <linux/types.h>): fixed-size fields only, explicit padding,
 * so both compilers agree on every offset. */
#ifndef GDW_DEVWATCH_EVENTS_H
#define GDW_DEVWATCH_EVENTS_H

#ifndef __VMLINUX_H__
#include <linux/types.h>
#endif

#define GDW_COMM_LEN 16
/* A v1 rule is "<type> <major>:<minor> <access>", at most ~30 characters; longer writes
 * are copied truncated (rule_len says how much was copied). */
#define GDW_RULE_MAX 64
/* Paths passed to open(); a GPU node path is far shorter. Also the watched_paths key. */
#define GDW_OPEN_PATH_MAX 256
/* cgroup paths from the cgroup_mkdir/rmdir tracepoints (kubelet/systemd paths are long). */
#define GDW_CGROUP_PATH_MAX 512

enum gdw_event_type {
  GDW_EVENT_RULE_WRITE = 1,
  GDW_EVENT_DENIED_OPEN = 2,
  GDW_EVENT_DEVICE_PROGRAM = 3,
  GDW_EVENT_CGROUP_MKDIR = 4,
  GDW_EVENT_CGROUP_RMDIR = 5,
  GDW_EVENT_RULE_WRITE_RESULT = 6,
  GDW_EVENT_DEVICE_PROGRAM_LOAD = 7,
  /* A BPF_CGROUP_DEVICE attach seen inside the kernel while it installs the program
   * (gdw_device_program_event, result 0): the attacher holds cgroup_mutex, so a query made
   * after reading this record sees the attach done or failed. */
  GDW_EVENT_DEVICE_PROGRAM_ATTACHING = 8,
  /* A BPF_CGROUP_DEVICE attach seen at the start of its bpf() call (lsm/bpf), before the
   * kernel acts on it: a query made after reading this record may come before the attach
   * is installed (gdw_device_program_event, result 0). */
  GDW_EVENT_DEVICE_PROGRAM_AHEAD = 9,
  /* A process user space waits for (awaited_writers) is exiting: every thread of it has
   * entered do_exit, so it writes nothing more (gdw_writer_exit_event). Sent before the
   * kernel tears the process down and its pidfd turns readable. */
  GDW_EVENT_WRITER_EXIT = 10,
};

/* Where a rule write was seen (gdw_rule_write_event.seen_at). */
enum gdw_seen_at {
  /* The kernel's CAP_SYS_ADMIN check in the devices controller (tp_btf/cap_capable): costs
   * nothing outside capability checks. The kernel has not parsed the rule yet, so the
   * result is known only when that check refused the write (-EPERM); otherwise a
   * gdw_rule_write_result_event follows while the syscall-exit hook is attached. */
  GDW_SEEN_AT_PERMISSION_CHECK = 1,
  /* Syscall exit (kernels without the cap_capable tracepoint): the result is known. */
  GDW_SEEN_AT_SYSCALL_EXIT = 2,
  /* The devices controller's write path (fexit/devcgroup_access_write; kernels without the
   * cap_capable tracepoint that allow BPF trampolines): the rule as the kernel parsed it
   * and the result are known; nothing else of the node passes there. */
  GDW_SEEN_AT_WRITE_PATH = 3,
};

/* bpf(2) commands reported in gdw_device_program_event.command. */
enum gdw_device_program_command {
  GDW_DEVPROG_PROG_ATTACH = 1,
  GDW_DEVPROG_PROG_DETACH = 2,
  GDW_DEVPROG_LINK_CREATE = 3,
  GDW_DEVPROG_LINK_DETACH = 4,
  GDW_DEVPROG_LINK_UPDATE = 5,
};

struct gdw_event_header {
  __u32 type; /* enum gdw_event_type */
  __u32 reserved;
  __u64 ktime_ns; /* CLOCK_MONOTONIC when the event was emitted */
};

struct gdw_process {
  __u32 pid; /* tgid */
  __u32 tid;
  __u32 parent_pid; /* real_parent's tgid */
  __u32 cpu;        /* the CPU it ran on as the record was made */
  __u64 cgroup_id;         /* cgroup v2 id (bpf_get_current_cgroup_id) */
  __u64 devices_cgroup_id; /* v1 devices cgroup id, 0 when unknown */
  __u64 start_time_ns;     /* the process's (group leader's) start, ns since boot: with pid, unique */
  char comm[GDW_COMM_LEN];
  char parent_comm[GDW_COMM_LEN];
};

struct gdw_rule_write_event {
  struct gdw_event_header header;
  struct gdw_process writer;
  __u64 target_cgroup_id; /* kernfs id (inode number) of the written cgroup directory */
  __s64 result;           /* bytes written or -errno, when result_known */
  __u32 deny;             /* 1: devices.deny, 0: devices.allow */
  __u32 rule_len;         /* bytes copied into rule (not NUL-terminated) */
  __u32 seen_at;          /* enum gdw_seen_at */
  __u32 result_known;     /* 0: the kernel had not decided yet (see gdw_seen_at) */
  char rule[GDW_RULE_MAX];
};

/* The syscall result of a write reported at the permission check (same tid). */
struct gdw_rule_write_result_event {
  struct gdw_event_header header;
  __u32 pid;
  __u32 tid;
  __u64 target_cgroup_id;
  __s64 result;         /* bytes written or -errno */
  __u64 write_ktime_ns; /* header.ktime_ns of the gdw_rule_write_event it completes */
};

/* BPF_PROG_LOAD of a BPF_PROG_TYPE_CGROUP_DEVICE program, seen at its CAP_BPF check: the
 * caller is about to attach a device program to some cgroup (cgroup v2). */
struct gdw_device_program_load_event {
  struct gdw_event_header header;
  struct gdw_process caller;
};

struct gdw_denied_open_event {
  struct gdw_event_header header;
  struct gdw_process opener;
  __s32 dfd;   /* openat's directory fd (AT_FDCWD for open) */
  __u32 flags; /* open flags */
  __u32 major; /* from watched_paths: only opens of registered GPU node paths are records */
  __u32 minor;
  char path[GDW_OPEN_PATH_MAX]; /* NUL-terminated, zero-filled */
};

struct gdw_writer_exit_event {
  struct gdw_event_header header;
  __u32 pid; /* tgid */
  __u32 reserved;
};

struct gdw_device_program_event {
  struct gdw_event_header header;
  struct gdw_process caller;
  __u32 command; /* enum gdw_device_program_command */
  __u32 flags;   /* attach_flags / link flags / link_update flags */
  __u32 prog_id;
  __u32 replaced_prog_id;
  __u64 target_cgroup_id;
  __s64 result;
};

struct gdw_cgroup_event {
  struct gdw_event_header header; /* GDW_EVENT_CGROUP_MKDIR or _RMDIR */
  /* Who made or removed it: a runtime that makes a container's cgroup (cgroupfs driver) or
   * crun's sub-cgroup (systemd driver) is in its apply until it exits. */
  struct gdw_process caller;
  __u32 hierarchy_id; /* 0: cgroup v2 */
  __s32 level;
  __u64 cgroup_id;
  char path[GDW_CGROUP_PATH_MAX]; /* NUL-terminated, relative to the hierarchy root */
};

/* watched_paths: the path string exactly as a process passes it to open(), zero-padded. */
struct gdw_path_key {
  char path[GDW_OPEN_PATH_MAX];
};

struct gdw_device_number {
  __u32 major;
  __u32 minor;
};

/* rule_writes_in_flight value, keyed by tid: a write reported at its permission check
 * whose result the syscall-exit hook reports. */
struct gdw_rule_write_in_flight {
  __u64 file; /* the struct file written (address; tells a later write apart) */
  __u64 target_cgroup_id;
  __u64 ktime_ns;
};

/* Where the kernel allocates a cgroup's new effective program array during an attach
 * (compute_effective_progs and its callers): the attach hook's call sites, looked up by
 * name at load (gdw_lookup_symbols). A site is the function's start; calls from within
 * GDW_SITE_SPAN bytes of it count (a wider window only costs a few more decodes). */
#define GDW_EFFECTIVE_PROGS_SITES 3
#define GDW_SITE_SPAN 4096

/* cgroup_device_links value, keyed by link id. */
struct gdw_device_link {
  __u64 cgroup_id;
  __u32 prog_id;
  __u32 reserved;
};

#endif /* GDW_DEVWATCH_EVENTS_H */
