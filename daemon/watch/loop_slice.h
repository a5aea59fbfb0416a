// The event loop thread's scheduler slice. A repair races the re-applier that revoked: its
// grants should land while the runtime is still writing its allow rules. On a busy node
// the loop's wake-up waits for the running task's slice to end (EEVDF's default is a few
// milliseconds), far longer than the repair itself (tens of microseconds). Linux 6.12 and
// later take a shorter slice for a SCHED_OTHER thread (sched_attr.sched_runtime, clamped to
// 0.1-100 ms): a wake-up then preempts sooner. Its CPU share, nice value and policy stay as
// they were; the kernel asks for the slice to cover the thread's usual run between sleeps,
// as one repair does.
//
// Threads started later by the loop thread inherit the slice; they sleep nearly always.
#pragma once

#include <sys/types.h>

#include <chrono>
#include <cstdint>
#include <string>

#include "core/result.h"

namespace gdw {

// The calling thread's scheduling attributes, as far as the slice needs them.
struct ThreadScheduling {
  std::uint32_t policy = 0;  // SCHED_OTHER, SCHED_BATCH, SCHED_IDLE, SCHED_FIFO, ...
  std::int32_t nice = 0;
  std::uint64_t slice_ns = 0;  // fair policies on 6.12+: the slice; 0 on older kernels
  std::uint32_t priority = 0;  // SCHED_FIFO / SCHED_RR: the real-time priority
  bool reset_on_fork = false;  // SCHED_FLAG_RESET_ON_FORK
};

// Whether a thread scheduled as `now` may have its slice set (pure): only under the default
// policy; one an operator chose (a unit's CPUSchedulingPolicy=) is left alone.
struct SliceDecision {
  bool request = false;  // call sched_setattr, policy and nice unchanged
  std::string reason;    // why not, when not
};
SliceDecision decide_slice(const ThreadScheduling& now);

// The calling thread's (`tid` 0), or thread `tid`'s.
Result<ThreadScheduling> read_thread_scheduling(pid_t tid = 0);

// Asks for `slice` on the calling thread (0: the kernel's default, also after a custom
// one). The value is the slice the thread has afterwards (0 on kernels before 6.12); an
// error says why it has not the one asked for (an older kernel, or a policy the operator
// chose).
Result<std::uint64_t> request_loop_slice(std::chrono::microseconds slice);

// The calling thread under SCHED_FIFO at `priority` (1-99): its wake-up preempts every fair
// task at once, however much CPU it used lately (a fair thread that has used more than its
// share waits, runnable, behind the others: milliseconds on a busy node, whatever its
// slice). SCHED_FLAG_RESET_ON_FORK: threads and processes it starts afterwards are fair
// again. Needs CAP_SYS_NICE or RLIMIT_RTPRIO >= priority.
Status request_loop_fifo(int priority);
// Back from SCHED_FIFO to SCHED_OTHER, nice as it is.
Status request_loop_fair();

}  // namespace gdw
