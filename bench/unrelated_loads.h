// BPF activity that has nothing to do with GPUs: another process loads a cgroup_device
// program `hz` times a second and never attaches it to any cgroup (what runc does for every
// container start and `runc update` on a node, seen from a GPU container's side). The
// loader is a forked child outside every sandbox cgroup; it closes each program at once.
#pragma once

#include <fcntl.h>
#include <signal.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <stdexcept>

#include "bench_signals.h"
#include "support/foreign_device_program.h"
#include "support/sandbox_node.h"

namespace gdw::bench {

struct LoadRun {
  long loads = 0;          // programs loaded
  long failed_loads = 0;   // loads the kernel refused
  double seconds = 0;      // how long it ran
};

namespace detail {

[[noreturn]] inline void run_loader(int hz, std::chrono::seconds duration, int report_fd) {
  LoadRun run;
  const auto rules = test::SandboxNode::spec_rules();
  timespec next{};
  ::clock_gettime(CLOCK_MONOTONIC, &next);
  const auto start = std::chrono::steady_clock::now(), end = start + duration;
  const long period_ns = 1'000'000'000L / hz;
  while (std::chrono::steady_clock::now() < end) {
    {
      test::ForeignProgram program("unrelated", rules);  // closed at once: never attached
      ++(program.fd >= 0 ? run.loads : run.failed_loads);
    }
    next.tv_nsec += period_ns;
    while (next.tv_nsec >= 1'000'000'000L) {
      next.tv_nsec -= 1'000'000'000L;
      ++next.tv_sec;
    }
    ::clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &next, nullptr);
  }
  run.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  (void)!::write(report_fd, &run, sizeof run);
  _exit(0);
}

}  // namespace detail

// Runs the loader for `duration` and returns what it did; `during` is called right after
// the loader starts and `after` as soon as it reports (the CPU window of a measurement).
template <class During, class After>
LoadRun run_unrelated_loads(int hz, std::chrono::seconds duration, During during, After after) {
  int pipe_fds[2];
  if (::pipe2(pipe_fds, O_CLOEXEC) != 0) throw std::runtime_error("pipe failed");
  const pid_t pid = ::fork();
  if (pid < 0) throw std::runtime_error("fork failed");
  if (pid == 0) {
    ::close(pipe_fds[0]);
    detail::run_loader(hz, duration, pipe_fds[1]);
  }
  ::close(pipe_fds[1]);
  during();
  LoadRun run;
  ssize_t n;
  while ((n = ::read(pipe_fds[0], &run, sizeof run)) < 0 && errno == EINTR) {
    if (g_interrupted) ::kill(pid, SIGKILL);
  }
  after();
  ::close(pipe_fds[0]);
  while (::waitpid(pid, nullptr, 0) < 0 && errno == EINTR) {
  }
  check_interrupted();
  if (n != static_cast<ssize_t>(sizeof run)) throw std::runtime_error("the program loader died without a report");
  return run;
}

}  // namespace gdw::bench
