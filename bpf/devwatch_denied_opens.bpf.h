/* devwatch (BPF side), denied opens: the sys_exit hook's open family, decided in the kernel.
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
#ifndef GDW_DEVWATCH_DENIED_OPENS_BPF_H
#define GDW_DEVWATCH_DENIED_OPENS_BPF_H

#include "devwatch_common.bpf.h"

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

#endif /* GDW_DEVWATCH_DENIED_OPENS_BPF_H */
