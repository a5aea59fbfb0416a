/* The end of a runtime's apply, seen as the runtime exits.
 *
 * The daemon grants a container's devices back only once the runtime process that revoked
 * them (runc, crun, the NVIDIA hook) has ended its apply: a grant inside it fails the
 * runtime's own check. Its pidfd says so only at the end of do_exit, after the kernel has
 * torn the process down (its memory, its files: ~0.3 ms for runc-sized processes on the
 * 2-vCPU CI VM). The sched_process_exit tracepoint comes before that teardown on 6.16+
 * (after the memory on older kernels). Once every thread of the process has entered
 * do_exit (signal->live is 0), none can make another system call: its apply has ended.
 *
 * Every writer a record names (a rule write, a device program change) is put into
 * awaited_writers as the record is made: the daemon reads the record and decides to wait
 * tens of microseconds later, by when a runtime that ends its apply with that write may
 * already be exiting. User space adds a writer again when it starts waiting for it, in
 * case a storm of other writers evicted the entry meanwhile. The last thread's exit takes
 * the entry out and reports it; the daemon ignores the exit of a writer it does not wait
 * for. An LRU map: an entry whose process ended before it was put there (the pidfd still
 * tells) is evicted in time, never in the way. */

struct {
  __uint(type, BPF_MAP_TYPE_LRU_HASH);
  __uint(max_entries, 1024);
  __type(key, __u32); /* tgid, as the initial pid namespace numbers it */
  __type(value, __u8);
} awaited_writers SEC(".maps");

/* The current process wrote a record: its exit is reported. */
static __always_inline void await_exit_of_current(void) {
  __u32 tgid = bpf_get_current_pid_tgid() >> 32;
  __u8 present = 1;
  bpf_map_update_elem(&awaited_writers, &tgid, &present, BPF_ANY);
}

/* The start of every record that names a writer (a rule write, a device program change):
 * its header, the writer, and the writer's exit awaited, in one place so that no such
 * record can leave its writer's exit unreported. */
static __always_inline void begin_writer_record(struct gdw_event_header *header, __u32 type,
                                                struct gdw_process *writer) {
  header->type = type;
  header->reserved = 0;
  header->ktime_ns = bpf_ktime_get_ns();
  fill_process(writer);
  await_exit_of_current();
}

static __always_inline int report_awaited_exit(struct task_struct *task) {
  __u32 tgid = BPF_CORE_READ(task, tgid);
  if (!bpf_map_lookup_elem(&awaited_writers, &tgid)) return 0;
  /* Another thread still runs: it could still write. Its own exit comes here too. */
  if (BPF_CORE_READ(task, signal, live.counter) != 0) return 0;
  if (bpf_map_delete_elem(&awaited_writers, &tgid) != 0) return 0; /* another CPU's exit reported it */
  struct gdw_writer_exit_event *e = reserve_event(sizeof(*e));
  if (!e) return 0;
  e->header.type = GDW_EVENT_WRITER_EXIT;
  e->header.reserved = 0;
  e->header.ktime_ns = bpf_ktime_get_ns();
  e->pid = tgid;
  e->reserved = 0;
  bpf_ringbuf_submit(e, 0);
  return 0;
}
