// The container fleet's waits for a runtime's apply to end before a check may grant
// (core/apply_wait.h decides). This part looks up what a decision needs, on the event loop
// and bounded: whether the revoking writer still runs (a pidfd, opened once per writer),
// whether the runtime's create has ended (its pid file, one stat until seen, and then the
// runtime that wrote it, while it runs); and it arms what ends a wait: the writer's pidfd
// turning readable at its exit, or a timer (the quiet period, the next look for the pid
// file, the limit). When a wait may have ended it tells its owner through `due(dir)`; the
// owner checks the container again, which asks wait() again. A hold (hold()) waits the
// same way for a runtime that made the container's cgroup, before anything is revoked.
#pragma once

#include <sys/types.h>

#include <functional>
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

#include "backend/device_programs_v2_kernel.h"
#include "core/apply_wait.h"
#include "metrics/daemon_metrics.h"
#include "metrics/repair_metrics.h"
#include "probe/probe.h"
#include "service/watched_container.h"
#include "watch/event_loop.h"

namespace gdw {

class ApplyWaits {
 public:
  using Due = std::function<void(const std::string& dir)>;
  ApplyWaits(EventLoop& loop, Metrics& metrics, ApplyWaitSettings settings, Due due);

  struct Request {
    Clock::time_point trigger{};
    // The revoking writer the probe named for this check, when writer_waited_for() its
    // name; 0: none.
    pid_t writer = 0;
    bool unnamed_write = false;   // a rule write or program change nobody named
    const DeviceProgramEvent* program_change = nullptr;  // the check's cause, kept while it waits
  };
  // Whether the check of `w` must wait now; if so, its trigger and cause are kept for the
  // check that follows due().
  bool wait(WatchedContainer& w, const Request& request);
  // A runtime at work on `w` (it made the container's cgroup or crun's sub-cgroup of it):
  // checks wait for `writer`'s exit as if it had revoked, though nothing waits yet. Its
  // exit alone keeps nothing to check (take() finds nothing). Whether it was held now (not
  // already, and still running).
  bool hold(WatchedContainer& w, pid_t writer);
  // A check that found probe records unread (RepairStep::deferred) is made again once the
  // loop has read them: due() at once, its trigger and cause kept.
  void defer(WatchedContainer& w, Clock::time_point trigger, const DeviceProgramEvent* program_change);
  // What a wait that ended kept: the oldest trigger and the latest program change.
  struct Kept {
    Clock::time_point trigger{};
    std::optional<DeviceProgramEvent> program_change;
  };
  std::optional<Kept> take(const std::string& dir);
  // Whether a check of `dir` waits (its trigger kept for the check that follows).
  bool keeps(const std::string& dir) const;
  // No more waits for `dir`: what it held is let go at release_ended() (a due() may run in
  // that very wait's callback).
  void forget(const std::string& dir);
  // A hold of `dir` that no check waits on is let go (its runtime exited, or the limit
  // came): whether there was one. Its wait's state is then the caller's to reset.
  bool drop_hold(const std::string& dir);
  // The probe saw writer `pid` exit (all its threads in do_exit, before its pidfd says so):
  // the waits held for it have ended; their dirs, for the owner to check now.
  std::vector<std::string> writer_exited(pid_t pid);
  // What the waits that ended since the last call held (a writer's pidfd and its epoll
  // registration, a timer) is let go, and how they ended counted, here: by the owner after
  // the check a wait let through, so that the close, the epoll_ctl and the metric (~30 µs
  // on a 2-vCPU VM) come after that check's grant rather than before it.
  void release_ended();
  std::size_t waiting() const { return held_.size(); }
  // The writer a wait for `dir` holds while it runs (named by a record, a runtime that made
  // the cgroup, or the runtime that wrote the create's pid file); 0: none.
  pid_t writer(const std::string& dir) const;

 private:
  struct Held {
    v2_kernel::OwnedFd pidfd;  // the writer's, while it runs
    pid_t pid = 0;
    pid_t exited = 0;  // the writer the probe saw exit: not waited for again
    EventSource exit_source;
    EventSource timer;
    std::optional<Kept> kept;
  };
  // What an ended wait held, until release_ended(). The pidfd is declared first, so it is
  // closed last: after its epoll registration is removed.
  struct Released {
    v2_kernel::OwnedFd pidfd;
    EventSource exit_source;
    EventSource timer;
  };
  // The writer named now, looked up unless it is the one already held.
  void take_writer(Held& h, pid_t pid);
  bool writer_running(Held& h);
  // `h`'s writer has exited: it is not looked at again, and its pidfd is let go later.
  void writer_gone(Held& h);
  // Whether the create has not ended (its pid file not yet written); once written, the
  // runtime that wrote it, if still running, becomes `h`'s writer.
  bool create_pending(WatchedContainer& w, Held& h);
  // wait() and hold(): `keep` keeps the request for the check that follows due().
  bool wait_or_hold(WatchedContainer& w, const Request& r, bool keep);
  void release(std::unordered_map<std::string, Held>::iterator it);
  void arm(const std::string& dir, Held& h, Clock::time_point at);
  void ended(const WatchedContainer& w, const Held& h, const ApplyWaitDecision& d);

  EventLoop& loop_;
  DaemonMetrics daemon_metrics_;
  RepairMetrics metrics_;
  const ApplyWaitSettings settings_;
  Due due_;
  std::unordered_map<std::string, Held> held_;  // by cgroup dir, while looked at
  std::vector<Released> released_;              // until release_ended()
  std::vector<ApplyWaitReason> ended_;          // how waits ended, counted in release_ended()
};

}  // namespace gdw
