// The floor under any reaction on this machine: how long an idle process takes to come back
// from epoll_wait once another process, busy on another CPU, makes its descriptor readable.
// A v2 reaction is such a wake-up (the daemon's epoll_wait on the probe's ring buffer, made
// readable inside the tenant's attach) plus the daemon's own work, so a reaction percentile
// below this one's is beyond any repairer that reacts in user space on this machine; the
// difference between the two is what the daemon adds. Measured as the spinners are: the
// waker stays busy on its CPU until the waiter has woken (the spinner busy-loops open()),
// and the waiter sleeps --gap-ms between samples, as the daemon does between re-applies.
// Here the descriptor is an eventfd written by the waker, not the ring buffer: no BPF, no
// daemon, so that nothing but the wake-up is in the figure.
#pragma once

#include <signal.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <new>
#include <stdexcept>
#include <vector>

namespace gdw::bench {

namespace detail {

inline long long now_ns() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

// The waiter: blocks in epoll_wait, notes when it returned, goes back to sleep. Killed by
// its parent (by PID) when the measurement ends.
[[noreturn]] inline void run_waiter(int event_fd, std::atomic<long long>* woke_at) {
  const int ep = ::epoll_create1(EPOLL_CLOEXEC);
  epoll_event ev{};
  ev.events = EPOLLIN;
  if (ep < 0 || ::epoll_ctl(ep, EPOLL_CTL_ADD, event_fd, &ev) != 0) _exit(1);
  for (;;) {
    epoll_event out{};
    if (::epoll_wait(ep, &out, 1, -1) != 1) continue;
    const long long at = now_ns();
    std::uint64_t count = 0;
    (void)!::read(event_fd, &count, sizeof count);
    woke_at->store(at, std::memory_order_release);
  }
}

}  // namespace detail

// `samples` wake-ups, `gap` apart (pause: how the caller sleeps, so that it can be
// interrupted); each in µs from the write to the waiter's epoll_wait returning.
inline std::vector<double> measure_wake_floor(int samples, std::chrono::milliseconds gap,
                                              const std::function<void(std::chrono::milliseconds)>& pause) {
  void* shared = ::mmap(nullptr, sizeof(std::atomic<long long>), PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS,
                        -1, 0);
  if (shared == MAP_FAILED) throw std::runtime_error("wake floor: mmap failed");
  auto* woke_at = new (shared) std::atomic<long long>(0);
  const int event_fd = ::eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
  if (event_fd < 0) throw std::runtime_error("wake floor: eventfd failed");
  const pid_t waiter = ::fork();
  if (waiter < 0) throw std::runtime_error("wake floor: fork failed");
  if (waiter == 0) detail::run_waiter(event_fd, woke_at);
  struct Reap {  // the waiter goes however this ends (an interrupt throws from pause)
    pid_t pid;
    int fd;
    void* shared;
    ~Reap() {
      ::kill(pid, SIGKILL);
      ::waitpid(pid, nullptr, 0);
      ::close(fd);
      ::munmap(shared, sizeof(std::atomic<long long>));
    }
  } reap{waiter, event_fd, shared};
  std::vector<double> us;
  pause(gap);  // the waiter is in epoll_wait by then
  for (int i = 0; i < samples; ++i) {
    woke_at->store(0, std::memory_order_relaxed);
    const long long sent = detail::now_ns();
    const std::uint64_t one = 1;
    if (::write(event_fd, &one, sizeof one) != sizeof one) throw std::runtime_error("wake floor: write failed");
    const long long give_up = sent + 1'000'000'000LL;
    long long at = 0;
    while ((at = woke_at->load(std::memory_order_acquire)) == 0 && detail::now_ns() < give_up) {
    }
    if (at == 0) throw std::runtime_error("wake floor: the waiter did not wake within 1 s");
    us.push_back(static_cast<double>(at - sent) / 1000.0);
    pause(gap);
  }
  return us;
}

}  // namespace gdw::bench
