// The floor under any reaction on this machine: how long an idle process takes to come back
// from epoll_wait once another process, busy on another CPU, makes its descriptor readable.
// A v2 reaction is such a wake-up (the daemon's epoll_wait on the probe's ring buffer, made
// readable inside the tenant's attach) plus the daemon's own work, so a reaction percentile
// below this one's is beyond any repairer that reacts in user space on this machine; the
// difference between the two is what the daemon adds. Measured as the spinners are: the
// waker stays busy on its CPU until the waiter has woken (the spinner busy-loops open()),
// and the waiter sleeps between samples, as the daemon does between re-applies: the bench
// takes one wake-up between each two re-applies, so that the floor and the reactions come
// from the same minutes of the same machine.
// Here the descriptor is an eventfd written by the waker, not the ring buffer: no BPF, no
// daemon, so that nothing but the wake-up is in the figure. Two waiters: one with the
// daemon's scheduler slice (the floor under the daemon as it runs), one with the kernel's
// default (what that slice changes).
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
#include <new>
#include <stdexcept>

#include "bench_stats.h"
#include "cpu_pinning.h"
#include "watch/loop_slice.h"

namespace gdw::bench {

namespace detail {

// What the waiter and the waker share (MAP_SHARED): when it woke, and whether it got the
// slice it asked for (kernels before 6.12 keep their default: the floor is then that one's).
struct WakeShared {
  std::atomic<long long> woke_at{0};
  std::atomic<int> slice_refused{0};
};

// The waiter: blocks in epoll_wait, notes when it returned, goes back to sleep. Killed by
// its parent (by PID) when the measurement ends.
[[noreturn]] inline void run_waiter(int event_fd, WakeShared* shared, std::uint32_t slice_us, int cpu) {
  if (cpu >= 0 && !pin_thread(0, cpu)) _exit(1);
  if (slice_us > 0 && !request_loop_slice(std::chrono::microseconds(slice_us))) shared->slice_refused.store(1);
  std::atomic<long long>* woke_at = &shared->woke_at;
  const int ep = ::epoll_create1(EPOLL_CLOEXEC);
  epoll_event ev{};
  ev.events = EPOLLIN;
  if (ep < 0 || ::epoll_ctl(ep, EPOLL_CTL_ADD, event_fd, &ev) != 0) _exit(1);
  for (;;) {
    epoll_event out{};
    if (::epoll_wait(ep, &out, 1, -1) != 1) continue;
    const long long at = steady_ns();
    std::uint64_t count = 0;
    (void)!::read(event_fd, &count, sizeof count);
    woke_at->store(at, std::memory_order_release);
  }
}

}  // namespace detail

// The waiter, for as long as this lives (killed by PID and reaped when it goes). `slice_us`:
// the scheduler slice it asks for as the daemon's event loop does (watch/loop_slice.h,
// daemon.event_loop_slice_us); 0, the kernel's default. `waiter_cpu`: the CPU it is pinned
// to (the daemon's, in the bench's cross-CPU mode); -1: any.
class WakeFloor {
 public:
  explicit WakeFloor(std::uint32_t slice_us, int waiter_cpu = -1) {
    void* mapped = ::mmap(nullptr, sizeof(detail::WakeShared), PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    if (mapped == MAP_FAILED) throw std::runtime_error("wake floor: mmap failed");
    shared_ = new (mapped) detail::WakeShared;
    event_fd_ = ::eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
    if (event_fd_ < 0) throw std::runtime_error("wake floor: eventfd failed");
    waiter_ = ::fork();
    if (waiter_ < 0) throw std::runtime_error("wake floor: fork failed");
    if (waiter_ == 0) detail::run_waiter(event_fd_, shared_, slice_us, waiter_cpu);
  }
  ~WakeFloor() {
    if (waiter_ > 0) {
      ::kill(waiter_, SIGKILL);
      ::waitpid(waiter_, nullptr, 0);
    }
    if (event_fd_ >= 0) ::close(event_fd_);
    ::munmap(shared_, sizeof(detail::WakeShared));
  }
  WakeFloor(const WakeFloor&) = delete;
  WakeFloor& operator=(const WakeFloor&) = delete;

  // One wake-up, in µs from the write to the waiter's epoll_wait returning. The caller
  // lets the waiter sleep between samples, as the daemon sleeps between re-applies.
  double sample_us() {
    std::atomic<long long>& woke_at = shared_->woke_at;
    woke_at.store(0, std::memory_order_relaxed);
    const long long sent = steady_ns();
    const std::uint64_t one = 1;
    if (::write(event_fd_, &one, sizeof one) != sizeof one) throw std::runtime_error("wake floor: write failed");
    const long long give_up = sent + 1'000'000'000LL;
    long long at = 0;
    while ((at = woke_at.load(std::memory_order_acquire)) == 0 && steady_ns() < give_up) {
    }
    if (at == 0) throw std::runtime_error("wake floor: the waiter did not wake within 1 s");
    return static_cast<double>(at - sent) / 1000.0;
  }
  // The kernel kept its default slice for the waiter (known once it has woken once).
  bool slice_refused() const { return shared_->slice_refused.load() != 0; }

 private:
  detail::WakeShared* shared_ = nullptr;
  int event_fd_ = -1;
  pid_t waiter_ = -1;
};

}  // namespace gdw::bench
