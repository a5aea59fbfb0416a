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

#include <bpf/bpf.h>
#include <linux/bpf.h>

#include <cerrno>
#include <cstdint>
#include <chrono>
#include <stdexcept>

#include "bench_signals.h"
#include "support/foreign_device_program.h"
#include "support/sandbox_node.h"

namespace gdw::bench {

// How many BPF program ids the kernel has handed out so far: the id of a trivial socket
// filter loaded (and closed) now. Ids are handed out in increasing order whether or not the
// programs still exist, so the difference between two calls, less one, counts the programs
// anyone loaded in between: on a machine shared with other test runs it tells a quiet
// window from one with someone else's BPF activity. A socket filter load costs the daemon
// nothing (it watches device programs). 0 when it cannot be loaded.
inline std::uint32_t bpf_program_ids_handed_out() {
  const bpf_insn return_zero[] = {{BPF_ALU64 | BPF_MOV | BPF_K, 0, 0, 0, 0}, {BPF_JMP | BPF_EXIT, 0, 0, 0, 0}};
  const int fd = ::bpf_prog_load(BPF_PROG_TYPE_SOCKET_FILTER, "gdw_bench_mark", "GPL", return_zero, 2, nullptr);
  if (fd < 0) return 0;
  bpf_prog_info info{};
  std::uint32_t len = sizeof info;
  const std::uint32_t id = ::bpf_obj_get_info_by_fd(fd, &info, &len) == 0 ? info.id : 0;
  ::close(fd);
  return id;
}

// Programs loaded by anyone between two bpf_program_ids_handed_out() calls.
inline long programs_loaded_between(std::uint32_t first, std::uint32_t last) {
  return first && last > first ? static_cast<long>(last - first) - 1 : 0;
}

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

// Runs the loader for `duration` and returns what it did; `before` is called right before
// the loader starts and `after` as soon as it reports (the window of a measurement).
template <class Before, class After>
LoadRun run_unrelated_loads(int hz, std::chrono::seconds duration, Before before, After after) {
  int pipe_fds[2];
  if (::pipe2(pipe_fds, O_CLOEXEC) != 0) throw std::runtime_error("pipe failed");
  before();
  const pid_t pid = ::fork();
  if (pid < 0) throw std::runtime_error("fork failed");
  if (pid == 0) {
    ::close(pipe_fds[0]);
    detail::run_loader(hz, duration, pipe_fds[1]);
  }
  ::close(pipe_fds[1]);
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
