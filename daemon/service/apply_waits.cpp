#include "service/apply_waits.h"

#include <poll.h>
#include <sys/epoll.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cerrno>

#include "log/log.h"
#include "runtime/create_runtime.h"
#include "service/arm_timer.h"

namespace gdw {
namespace {

// The processes the probe names: the node's own /proc, whatever root the rest is read under.
constexpr const char* kLiveProcRoot = "/proc";

int pidfd_open(pid_t pid) { return static_cast<int>(::syscall(SYS_pidfd_open, pid, 0)); }

bool exited(int pidfd) {
  struct pollfd p{pidfd, POLLIN, 0};
  return ::poll(&p, 1, 0) != 0;  // readable (or an error): the process is gone
}

}  // namespace

ApplyWaits::ApplyWaits(EventLoop& loop, Metrics& metrics, ApplyWaitSettings settings, Due due)
    : loop_(loop), daemon_metrics_(metrics), metrics_(metrics), settings_(settings), due_(std::move(due)) {}

void ApplyWaits::take_writer(Held& h, pid_t pid) {
  if (pid <= 0 || pid == h.exited || (pid == h.pid && h.pidfd.valid())) return;
  v2_kernel::OwnedFd fd(pidfd_open(pid));
  if (!fd.valid() || exited(fd.get())) return;  // gone already: its apply has ended
  h.exit_source = EventSource();
  h.pidfd = std::move(fd);
  h.pid = pid;
}

pid_t ApplyWaits::writer(const std::string& dir) const {
  const auto it = held_.find(dir);
  return it != held_.end() && it->second.pidfd.valid() ? it->second.pid : 0;
}

bool ApplyWaits::writer_running(Held& h) {
  if (!h.pidfd.valid()) return false;
  if (!exited(h.pidfd.get())) return true;
  writer_gone(h);
  return false;
}

void ApplyWaits::writer_gone(Held& h) {
  released_.push_back({std::move(h.pidfd), std::move(h.exit_source), EventSource()});
  h.exited = h.pid;
}

std::vector<std::string> ApplyWaits::writer_exited(pid_t pid) {
  std::vector<std::string> due;
  for (auto& [dir, h] : held_) {
    if (pid <= 0 || h.pid != pid || !h.pidfd.valid()) continue;
    writer_gone(h);
    due.push_back(dir);
  }
  return due;
}

void ApplyWaits::release_ended() {
  released_.clear();  // keeps its capacity: no allocation at the next wait's end
  for (ApplyWaitReason r : ended_) metrics_.apply_wait(to_string(r));
  ended_.clear();
}

bool ApplyWaits::create_pending(WatchedContainer& w, Held& h) {
  if (!w.creating()) return false;
  struct stat st{};
  if (::stat(w.create_marker.c_str(), &st) != 0) return true;
  w.create_ended = true;  // the pid file stays while the container lives: one stat until seen
  // Written before the runtime exits: while its first process's parent is still a runtime,
  // that create is waited for (runtime/create_runtime.h), whether or not the probe saw it.
  if (const auto runtime = create_runtime_at_work(w.create_marker, kLiveProcRoot)) take_writer(h, runtime->pid);
  return false;
}

bool ApplyWaits::wait(WatchedContainer& w, const Request& r) {
  const auto it = held_.find(w.cgroup.cgroup_dir);
  if (it == held_.end() && r.writer == 0 && !r.unnamed_write && !w.creating() &&
      !w.apply_wait.since && Clock::now() >= w.apply_wait.quiet_until)
    return false;  // the common case, decided without a lookup
  return wait_or_hold(w, r, /*keep=*/true);
}

bool ApplyWaits::hold(WatchedContainer& w, pid_t writer) {
  if (writer <= 0) return false;
  // Held for it already (a runtime writes a dozen rules in one apply): nothing to look up.
  if (const auto it = held_.find(w.cgroup.cgroup_dir);
      it != held_.end() && it->second.pid == writer && it->second.pidfd.valid())
    return false;
  return wait_or_hold(w, Request{.trigger = Clock::now(), .writer = writer}, /*keep=*/false);
}

void ApplyWaits::defer(WatchedContainer& w, Clock::time_point trigger, const DeviceProgramEvent* program_change) {
  const std::string& dir = w.cgroup.cgroup_dir;
  Held& h = held_[dir];
  Kept& kept = h.kept ? *h.kept : h.kept.emplace(Kept{trigger, std::nullopt});
  kept.trigger = std::min(kept.trigger, trigger);
  if (program_change) kept.program_change = *program_change;
  arm(dir, h, Clock::now());
}

void ApplyWaits::forget(const std::string& dir) {
  if (auto it = held_.find(dir); it != held_.end()) release(it);
}

bool ApplyWaits::drop_hold(const std::string& dir) {
  auto it = held_.find(dir);
  if (it == held_.end() || it->second.kept) return false;
  release(it);
  return true;
}

void ApplyWaits::release(std::unordered_map<std::string, Held>::iterator it) {
  Held& h = it->second;
  released_.push_back({std::move(h.pidfd), std::move(h.exit_source), std::move(h.timer)});
  held_.erase(it);
}

bool ApplyWaits::wait_or_hold(WatchedContainer& w, const Request& r, bool keep) {
  const std::string& dir = w.cgroup.cgroup_dir;
  Held& h = held_[dir];
  take_writer(h, r.writer);
  const bool creating = create_pending(w, h);  // may name the create's runtime
  ApplyWaitInputs in;
  if (writer_running(h)) in.live_writer = h.pid;
  if (!keep && !in.live_writer) {  // a hold whose runtime has exited already: nothing to hold
    if (!h.kept && !h.timer) release(held_.find(dir));  // made just now
    return false;
  }
  in.create_pending = creating;
  in.create_watched = w.create_wd >= 0;
  in.unnamed_write = r.unnamed_write;
  const auto now = Clock::now();
  const ApplyWaitDecision d = decide_apply_wait(w.apply_wait, in, r.trigger, now, settings_);
  if (!d.wait) {
    // A create that did not end within the limit is not waited for again.
    if (d.ended == ApplyWaitReason::kLimit && in.create_pending) w.create_ended = true;
    // A hold that ends is no wait of a check's: not counted.
    if (d.ended && (keep || h.kept)) ended(w, h, d);
    release(held_.find(dir));
    return false;
  }
  if (keep) {
    Kept& kept = h.kept ? *h.kept : h.kept.emplace(Kept{r.trigger, std::nullopt});
    kept.trigger = std::min(kept.trigger, r.trigger);
    if (r.program_change) kept.program_change = *r.program_change;
  }
  if (in.live_writer && !h.exit_source) {
    auto src = loop_.add_io(h.pidfd.get(), EPOLLIN, [this, dir](std::uint32_t) {
      // Readable: the writer has exited. Level-triggered: its source is dropped before the
      // loop waits again (release_ended()), so an exited writer wakes its owner once.
      if (auto found = held_.find(dir); found != held_.end()) writer_gone(found->second);
      due_(dir);
      release_ended();
    }, "writer-exit", -10);
    if (src) h.exit_source = std::move(*src);
  }
  arm(dir, h, d.recheck_at);
  return true;
}

void ApplyWaits::arm(const std::string& dir, Held& h, Clock::time_point at) {
  if (!h.timer) {
    auto t = loop_.add_timer([this, dir] {
      due_(dir);
      release_ended();
    }, "apply-wait");
    if (!t) return;  // the limit then comes with the next trigger or resync
    h.timer = std::move(*t);
  }
  const auto now = Clock::now();
  arm_timer(h.timer, at > now ? at - now : Clock::duration::zero(), "apply-wait", daemon_metrics_);
}

std::optional<ApplyWaits::Kept> ApplyWaits::take(const std::string& dir) {
  auto it = held_.find(dir);
  if (it == held_.end() || !it->second.kept) return std::nullopt;
  return std::exchange(it->second.kept, std::nullopt);
}

bool ApplyWaits::keeps(const std::string& dir) const {
  const auto it = held_.find(dir);
  return it != held_.end() && it->second.kept;
}

void ApplyWaits::ended(const WatchedContainer& w, const Held& h, const ApplyWaitDecision& d) {
  ended_.push_back(*d.ended);
  if (*d.ended != ApplyWaitReason::kLimit) return;
  std::string what = "the rule writes to go quiet";
  if (w.apply_wait.reason == ApplyWaitReason::kWriterExit)
    what = "the writer (pid " + std::to_string(h.pid) + ") to exit";
  else if (w.apply_wait.reason == ApplyWaitReason::kCreate)
    what = "the runtime's create to end (" + w.create_marker + " not written)";
  log::warn("granting after waiting " +
                std::to_string(std::chrono::duration_cast<std::chrono::milliseconds>(settings_.limit).count()) +
                " ms for " + what + " (repair.apply_wait_limit)",
            w.log_fields());
}

}  // namespace gdw
