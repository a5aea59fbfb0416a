// A tenant's view of a re-apply: a process inside a GPU container's cgroup makes the
// re-apply itself (bench/reappliers.h), then open()s its GPU node in a loop until the open
// is no longer EPERM (ENXIO on a sandbox node: allowed, no driver; a descriptor with a real
// driver). It times, on the steady clock:
//   reaction  the re-apply's attach (v1: its last write) returned -> the first allowed open;
//   window    the re-apply's first harmful call started          -> the first allowed open;
//   from exit (with SpinOptions::runtime_process) the re-applying process's exit
//             -> the first allowed open: the re-apply is made as a runtime makes it, by a
//             process of its own named "runc" that exits once applied (after
//             runtime_tail, the rest of a runtime's work), and the daemon grants only once
//             it has exited (core/apply_wait.h);
// and counts the EPERM opens in between. The first allowed open counts from its start: the
// device was allowed by then (the open before it, started a moment earlier, was denied).
// What the open does once allowed is the driver's time, not denial: on a sandbox node on a
// kernel with modules, the kernel runs modprobe for the node's driverless major inside the
// open (measured on the H100 VM: 0.2-0.3 ms per allowed open), and a real GPU's driver
// opens its device. One forked process per sample, reaped before
// spin_once() returns, so nothing is left in the cgroup.
#pragma once

#include <fcntl.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdint>
#include <cstring>
#include <stdexcept>
#include <string>

#include "bench_signals.h"
#include "bench_stats.h"
#include "reappliers.h"
#include "support/cgroup_sandbox.h"
#include "support/sandbox_node.h"

namespace gdw::bench {

enum class ReapplyStyle { kRuncV2, kSystemdV2, kOldRuncV1 };

inline const char* to_string(ReapplyStyle s) {
  switch (s) {
    case ReapplyStyle::kRuncV2: return "runc-style";
    case ReapplyStyle::kSystemdV2: return "systemd-style";
    case ReapplyStyle::kOldRuncV1: return "old runc (v1)";
  }
  return "?";
}

struct SpinTarget {
  std::string cgroup_dir;  // absolute
  std::string node;        // the container's GPU node (mknod'ed)
  // systemd style: the program that re-applier attached last time here (0: none yet).
  std::uint32_t systemd_previous = 0;
};

struct SpinOptions {
  std::chrono::milliseconds timeout{15000};  // still EPERM then: the sample failed
  // Pause after each EPERM open; 0: a busy loop (a tenant retrying as fast as it can, each
  // denied open an event for the daemon's probe while its syscall hook is attached).
  std::chrono::microseconds open_interval{0};
  // The re-apply by a child process named "runc" that exits after it (and runtime_tail).
  bool runtime_process = false;
  std::chrono::microseconds runtime_tail{0};
};

struct SpinSample {
  bool allowed = false;  // an open stopped being EPERM within the timeout
  std::string error;     // otherwise: why (a failed step, the timeout, an unexpected errno)
  double reaction_us = 0, window_us = 0;
  double from_exit_us = -1;        // runtime_process: the re-applier's exit -> the first allowed open (-1: none)
  // runtime_process: that open had returned before the re-applier's exit, so the device was
  // allowed before it. (An open that only started before the exit proves nothing: seen in a
  // trace, an open the exiting runtime preempted on its CPU started 54 us before the exit
  // stamp and was checked after the daemon's grant, 139 us after it.)
  bool allowed_before_exit = false;
  long long eperm = 0;             // EPERM opens seen before the first allowed one
  std::uint32_t program_id = 0;    // v2: the program the re-apply attached
};

namespace detail {

// What the spinner sends back through its pipe (plain data, one write).
struct SpinReport {
  int error = 0;  // errno of the failed step
  char step[16] = {};
  int final_errno = 0;  // of the open that ended the loop (0: a descriptor)
  int timed_out = 0;
  long long harm_start_ns = 0, applied_ns = 0, allowed_ns = 0, allowed_end_ns = 0, eperm = 0, exit_ns = 0;
  std::uint32_t program_id = 0;
};

// What a runtime-like re-applier process says: its re-apply, then (a second write, just
// before _exit) when it exits.
struct RuntimeReport {
  int error = 0;
  char step[16] = {};
  long long harm_start_ns = 0, applied_ns = 0;
  std::uint32_t program_id = 0;
};

inline Reapply reapply_in_child(const SpinTarget& t, ReapplyStyle style) {
  if (style == ReapplyStyle::kOldRuncV1) return reapply_old_runc_v1(t.cgroup_dir, test::SandboxNode::spec_allow_rules());
  const int cg = ::open(t.cgroup_dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (cg < 0) return failed(Reapply{}, "open cgroup", errno);
  const Reapply r = style == ReapplyStyle::kRuncV2
                        ? reapply_runc_style(cg, test::SandboxNode::spec_rules())
                        : reapply_systemd_style(cg, test::SandboxNode::spec_rules(), t.systemd_previous);
  ::close(cg);
  return r;
}

// Forks the re-applier as a runtime is one: a process named "runc" (how the probe's record
// names it) that re-applies, reports, works on for `tail` and exits. Returns its pid, or -1;
// `*report_fd` reads its two reports.
inline pid_t start_runtime_process(const SpinTarget& t, ReapplyStyle style, std::chrono::microseconds tail,
                                   int* report_fd) {
  int p[2];
  if (::pipe2(p, O_CLOEXEC) != 0) return -1;
  const pid_t pid = ::fork();
  if (pid != 0) {
    ::close(p[1]);
    *report_fd = p[0];
    if (pid < 0) ::close(p[0]);
    return pid;
  }
  ::close(p[0]);
  ::prctl(PR_SET_NAME, "runc");
  const Reapply r = reapply_in_child(t, style);
  RuntimeReport rep;
  rep.error = r.error;
  std::strncpy(rep.step, r.step, sizeof rep.step - 1);
  rep.harm_start_ns = steady_ns(r.harm_start);
  rep.applied_ns = steady_ns(r.applied);
  rep.program_id = r.program_id;
  (void)!::write(p[1], &rep, sizeof rep);
  const auto until = std::chrono::steady_clock::now() + tail;
  while (std::chrono::steady_clock::now() < until) {
  }
  const long long exit_ns = steady_ns();
  (void)!::write(p[1], &exit_ns, sizeof exit_ns);
  _exit(0);
}

// The re-apply made by this process, or by a runtime-like child (SpinOptions::runtime_process):
// then `*child` and `*child_fd` are that child's, for its exit report.
inline Reapply reapply_for_spinner(const SpinTarget& t, ReapplyStyle style, const SpinOptions& o, pid_t* child,
                                   int* child_fd) {
  if (!o.runtime_process) return reapply_in_child(t, style);
  *child = start_runtime_process(t, style, o.runtime_tail, child_fd);
  if (*child < 0) return failed(Reapply{}, "fork runc", errno);
  RuntimeReport rep;
  if (::read(*child_fd, &rep, sizeof rep) != static_cast<ssize_t>(sizeof rep)) return failed(Reapply{}, "runc died", EIO);
  Reapply r;
  r.error = rep.error;
  r.step = rep.error ? "runc's re-apply" : "";
  r.harm_start = std::chrono::steady_clock::time_point(std::chrono::nanoseconds(rep.harm_start_ns));
  r.applied = std::chrono::steady_clock::time_point(std::chrono::nanoseconds(rep.applied_ns));
  r.program_id = rep.program_id;
  return r;
}

[[noreturn]] inline void run_spinner(const SpinTarget& t, ReapplyStyle style, const SpinOptions& o, int report_fd) {
  SpinReport rep;
  auto finish = [&] {
    (void)!::write(report_fd, &rep, sizeof rep);
    _exit(0);
  };
  if (int err = test::move_to_cgroup(t.cgroup_dir, ::getpid())) {
    rep.error = err;
    std::strncpy(rep.step, "join cgroup", sizeof rep.step - 1);
    finish();
  }
  pid_t child = -1;
  int child_fd = -1;
  const Reapply r = reapply_for_spinner(t, style, o, &child, &child_fd);
  // The runtime-like child's exit report comes once it has exited; reaped before the report.
  auto reap_child = [&] {
    if (child <= 0) return;
    long long exit_ns = 0;
    if (::read(child_fd, &exit_ns, sizeof exit_ns) == static_cast<ssize_t>(sizeof exit_ns)) rep.exit_ns = exit_ns;
    ::close(child_fd);
    while (::waitpid(child, nullptr, 0) < 0 && errno == EINTR) {
    }
  };
  rep.program_id = r.program_id;
  if (r.error != 0) {
    reap_child();
    rep.error = r.error;
    std::strncpy(rep.step, r.step, sizeof rep.step - 1);
    finish();
  }
  rep.harm_start_ns = steady_ns(r.harm_start);
  rep.applied_ns = steady_ns(r.applied);
  const auto deadline = std::chrono::steady_clock::now() + o.timeout;
  const timespec pause{0, static_cast<long>(std::chrono::nanoseconds(o.open_interval).count())};
  for (;;) {
    const auto started = std::chrono::steady_clock::now();
    const int fd = ::open(t.node.c_str(), O_RDWR | O_NONBLOCK | O_CLOEXEC);
    const int err = fd < 0 ? errno : 0;
    const auto at = std::chrono::steady_clock::now();
    if (fd >= 0) ::close(fd);
    if (err != EPERM) {
      rep.allowed_ns = steady_ns(started);
      rep.allowed_end_ns = steady_ns(at);
      rep.final_errno = err;
      reap_child();
      finish();
    }
    ++rep.eperm;
    if (at > deadline) {
      rep.timed_out = 1;
      reap_child();
      finish();
    }
    if (pause.tv_nsec > 0) ::nanosleep(&pause, nullptr);
  }
}

}  // namespace detail

// One sample: forks the spinner, waits for its report, reaps it. On SIGINT the spinner is
// killed by PID and check_interrupted() throws.
inline SpinSample spin_once(const SpinTarget& t, ReapplyStyle style, const SpinOptions& o) {
  int pipe_fds[2];
  if (::pipe2(pipe_fds, O_CLOEXEC) != 0) throw std::runtime_error("pipe failed");
  const pid_t pid = ::fork();
  if (pid < 0) throw std::runtime_error("fork failed");
  if (pid == 0) {
    ::close(pipe_fds[0]);
    detail::run_spinner(t, style, o, pipe_fds[1]);
  }
  ::close(pipe_fds[1]);
  detail::SpinReport rep;
  ssize_t n;
  while ((n = ::read(pipe_fds[0], &rep, sizeof rep)) < 0 && errno == EINTR) {
    if (g_interrupted) ::kill(pid, SIGKILL);
  }
  ::close(pipe_fds[0]);
  while (::waitpid(pid, nullptr, 0) < 0 && errno == EINTR) {
  }
  check_interrupted();
  SpinSample s;
  s.program_id = rep.program_id;
  s.eperm = rep.eperm;
  if (n != static_cast<ssize_t>(sizeof rep)) {
    s.error = "the spinner died without a report";
  } else if (rep.error != 0) {
    s.error = std::string(rep.step) + ": " + std::strerror(rep.error);
  } else if (rep.timed_out) {
    s.error = "still EPERM after " + std::to_string(o.timeout.count()) + " ms";
  } else if (rep.final_errno != 0 && rep.final_errno != ENXIO) {
    s.error = std::string("open: ") + std::strerror(rep.final_errno);
  } else {
    s.allowed = true;
    s.reaction_us = static_cast<double>(rep.allowed_ns - rep.applied_ns) / 1e3;
    s.window_us = static_cast<double>(rep.allowed_ns - rep.harm_start_ns) / 1e3;
    if (rep.exit_ns != 0) s.from_exit_us = static_cast<double>(rep.allowed_ns - rep.exit_ns) / 1e3;
    s.allowed_before_exit = rep.exit_ns != 0 && rep.allowed_end_ns < rep.exit_ns;
  }
  return s;
}

}  // namespace gdw::bench
