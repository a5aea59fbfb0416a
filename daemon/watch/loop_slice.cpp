#include "watch/loop_slice.h"

#include <sched.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

namespace gdw {
namespace {

// The kernel's struct sched_attr, first published size (SCHED_ATTR_SIZE_VER0): glibc 2.36
// declares neither it nor the calls, and <linux/sched/types.h> clashes with <sched.h>.
struct KernelSchedAttr {
  std::uint32_t size;
  std::uint32_t sched_policy;
  std::uint64_t sched_flags;
  std::int32_t sched_nice;
  std::uint32_t sched_priority;
  std::uint64_t sched_runtime;
  std::uint64_t sched_deadline;
  std::uint64_t sched_period;
};
static_assert(sizeof(KernelSchedAttr) == 48);
constexpr std::uint64_t kResetOnFork = 0x01;  // SCHED_FLAG_RESET_ON_FORK

Result<KernelSchedAttr> get_attr(pid_t tid = 0) {
  KernelSchedAttr attr{};
  if (::syscall(SYS_sched_getattr, tid, &attr, sizeof attr, 0) != 0)
    return errno_error(errno, std::string("sched_getattr: ") + std::strerror(errno));
  return attr;
}

ThreadScheduling scheduling_of(const KernelSchedAttr& attr) {
  return ThreadScheduling{attr.sched_policy, attr.sched_nice, attr.sched_runtime, attr.sched_priority,
                          (attr.sched_flags & kResetOnFork) != 0};
}

const char* policy_name(std::uint32_t policy) {
  switch (policy) {
    case SCHED_BATCH: return "SCHED_BATCH";
    case SCHED_IDLE: return "SCHED_IDLE";
    case SCHED_FIFO: return "SCHED_FIFO";
    case SCHED_RR: return "SCHED_RR";
    default: return "a non-default policy";
  }
}

}  // namespace

SliceDecision decide_slice(const ThreadScheduling& now) {
  // Whoever chose another policy for the daemon (a unit's CPUSchedulingPolicy=) meant it.
  if (now.policy != SCHED_OTHER)
    return {false, std::string("the thread runs under ") + policy_name(now.policy) + ", an operator's choice"};
  return {true, {}};
}

Result<ThreadScheduling> read_thread_scheduling(pid_t tid) {
  auto attr = get_attr(tid);
  if (!attr) return attr.error();
  return scheduling_of(*attr);
}

Result<std::uint64_t> request_loop_slice(std::chrono::microseconds slice) {
  auto attr = get_attr();
  if (!attr) return attr.error();
  const SliceDecision decision = decide_slice(scheduling_of(*attr));
  if (!decision.request) return errno_error(EPERM, decision.reason);
  const auto wanted_ns = static_cast<std::uint64_t>(std::chrono::nanoseconds(slice).count());
  KernelSchedAttr set = *attr;  // policy and nice as they are
  set.size = sizeof set;
  set.sched_flags = attr->sched_flags & kResetOnFork;
  set.sched_priority = 0;
  set.sched_runtime = wanted_ns;
  set.sched_deadline = set.sched_period = 0;
  if (::syscall(SYS_sched_setattr, 0, &set, 0) != 0)
    return errno_error(errno, std::string("sched_setattr: ") + std::strerror(errno));
  auto after = get_attr();
  if (!after) return after.error();
  // Kernels before 6.12 accept the call and keep their own slice (read back as 0).
  if (wanted_ns != 0 && after->sched_runtime != wanted_ns)
    return errno_error(ENOTSUP, "the kernel keeps its own slice for fair tasks (Linux 6.12 and later take one per thread)");
  return after->sched_runtime;
}

namespace {

// The calling thread under `policy` at `priority`, nice as it is.
Status set_policy(std::uint32_t policy, std::uint64_t flags, std::uint32_t priority, const char* name) {
  auto attr = get_attr();
  if (!attr) return attr.error();
  KernelSchedAttr set = *attr;
  set.size = sizeof set;
  set.sched_policy = policy;
  set.sched_flags = flags;
  set.sched_priority = priority;
  set.sched_runtime = set.sched_deadline = set.sched_period = 0;
  if (::syscall(SYS_sched_setattr, 0, &set, 0) != 0)
    return errno_error(errno, std::string("sched_setattr(") + name + "): " + std::strerror(errno));
  return {};
}

}  // namespace

Status request_loop_fifo(int priority) {
  return set_policy(SCHED_FIFO, kResetOnFork, static_cast<std::uint32_t>(priority), "SCHED_FIFO");
}

Status request_loop_fair() { return set_policy(SCHED_OTHER, 0, 0, "SCHED_OTHER"); }

}  // namespace gdw
