#include "support/open_spinner.h"

#include <fcntl.h>
#include <sched.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <new>
#include <cstring>
#include <thread>

namespace gdw::test {

struct OpenSpinner::Shared {
  struct Phase {
    std::atomic<std::uint64_t> opens{0}, denied{0};
    std::atomic<std::int64_t> longest_denial_ns{0};
  };
  std::atomic<int> phase{0};
  std::atomic<int> stop{0};
  std::atomic<int> joined{0};  // 1 joined the cgroup, -1 could not
  std::atomic<std::uint64_t> rounds{0};
  // The denial run in progress (start 0: none), so that stats() sees it before it ends.
  std::atomic<std::int64_t> run_start_ns{0};
  std::atomic<int> run_phase{0};
  Phase phases[kMaxPhases];
};

namespace {

std::int64_t now_ns() {
  timespec ts{};
  ::clock_gettime(CLOCK_MONOTONIC, &ts);
  return static_cast<std::int64_t>(ts.tv_sec) * 1'000'000'000 + ts.tv_nsec;
}

void raise_to(std::atomic<std::int64_t>& target, std::int64_t value) {
  std::int64_t seen = target.load(std::memory_order_relaxed);
  while (value > seen && !target.compare_exchange_weak(seen, value, std::memory_order_relaxed)) {
  }
}

// The child's loop: only system calls and atomics on the shared mapping.
[[noreturn]] void spin(OpenSpinner::Shared* s, const char* procs, const std::vector<const char*>& nodes) {
  const int fd = ::open(procs, O_WRONLY | O_CLOEXEC);
  const bool joined = fd >= 0 && ::write(fd, "0", 1) == 1;
  if (fd >= 0) ::close(fd);
  s->joined.store(joined ? 1 : -1);
  if (!joined) _exit(1);
  while (s->stop.load(std::memory_order_relaxed) == 0) {
    const int phase = s->phase.load(std::memory_order_relaxed);
    auto& p = s->phases[phase];
    bool denied = false;
    for (const char* node : nodes) {
      const int node_fd = ::open(node, O_RDWR | O_NONBLOCK | O_CLOEXEC);
      const int err = node_fd >= 0 ? 0 : errno;
      if (node_fd >= 0) ::close(node_fd);
      p.opens.fetch_add(1, std::memory_order_relaxed);
      if (err == EPERM) {
        p.denied.fetch_add(1, std::memory_order_relaxed);
        denied = true;
      }
    }
    const std::int64_t now = now_ns();
    const std::int64_t run_start = s->run_start_ns.load(std::memory_order_relaxed);
    if (denied && run_start == 0) {
      s->run_phase.store(phase, std::memory_order_relaxed);
      s->run_start_ns.store(now, std::memory_order_relaxed);
    } else if (!denied && run_start != 0) {
      raise_to(s->phases[s->run_phase.load(std::memory_order_relaxed)].longest_denial_ns, now - run_start);
      s->run_start_ns.store(0, std::memory_order_relaxed);
    }
    s->rounds.fetch_add(1, std::memory_order_relaxed);
    // A tenant's poller does not keep the daemon it waits for off the CPU (2 cores here).
    ::sched_yield();
  }
  const std::int64_t run_start = s->run_start_ns.load();
  if (run_start != 0) raise_to(s->phases[s->run_phase.load()].longest_denial_ns, now_ns() - run_start);
  _exit(0);
}

}  // namespace

OpenSpinner::OpenSpinner(const std::string& cgroup_dir, const std::vector<std::string>& nodes) {
  void* mem = ::mmap(nullptr, sizeof(Shared), PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
  if (mem == MAP_FAILED) {
    error_ = std::string("mmap: ") + std::strerror(errno);
    return;
  }
  shared_ = new (mem) Shared();
  const std::string procs = cgroup_dir + "/cgroup.procs";
  std::vector<const char*> paths;
  for (const auto& n : nodes) paths.push_back(n.c_str());
  pid_ = ::fork();
  if (pid_ < 0) {
    error_ = std::string("fork: ") + std::strerror(errno);
    return;
  }
  if (pid_ == 0) spin(shared_, procs.c_str(), paths);
  for (int i = 0; i < 5000 && shared_->joined.load() == 0; ++i) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  if (shared_->joined.load() != 1) error_ = "the spinner could not join " + cgroup_dir;
}

OpenSpinner::~OpenSpinner() {
  stop();
  if (shared_ != nullptr) {
    shared_->~Shared();
    ::munmap(shared_, sizeof(Shared));
  }
}

void OpenSpinner::set_phase(int phase) {
  if (shared_ != nullptr && phase >= 0 && phase < kMaxPhases) shared_->phase.store(phase);
}

OpenSpinner::PhaseStats OpenSpinner::stats(int phase) const {
  PhaseStats out;
  if (shared_ == nullptr || phase < 0 || phase >= kMaxPhases) return out;
  const auto& p = shared_->phases[phase];
  out.opens = p.opens.load();
  out.denied = p.denied.load();
  out.longest_denial_ns = p.longest_denial_ns.load();
  const std::int64_t run_start = shared_->run_start_ns.load();
  if (run_start != 0 && shared_->run_phase.load() == phase)
    out.longest_denial_ns = std::max(out.longest_denial_ns, now_ns() - run_start);
  return out;
}

std::uint64_t OpenSpinner::rounds() const { return shared_ != nullptr ? shared_->rounds.load() : 0; }

void OpenSpinner::stop() {
  if (pid_ <= 0) return;
  shared_->stop.store(1);
  for (int i = 0; i < 2000; ++i) {
    if (::waitpid(pid_, nullptr, WNOHANG) == pid_) {
      pid_ = -1;
      return;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  ::kill(pid_, SIGKILL);
  ::waitpid(pid_, nullptr, 0);
  pid_ = -1;
}

}  // namespace gdw::test
