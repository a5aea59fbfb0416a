// Device programs loaded on a thread of the daemon's own, off the event loop: the wrapper a
// grant will need for the program a runtime has just attached, loaded while the runtime
// still applies (the grant waits for its exit anyway).
//
// Why not on the loop: a verifier run is ~0.5 ms of CPU on a 2-vCPU VM. Made by the loop
// shortly before the runtime's exit, it counted against the loop thread's share, and the
// exit then found the loop not eligible to run before a busy tenant's slice ended (2.4 ms to
// the grant, measured). Made at the grant instead, it is ~0.5 ms on the reaction's path
// (the first repair after a start that meets a program never seen: the runtime matrix's
// slowest grant after a runtime's exit in every v2 cell). Here it counts against this
// thread, which runs as SCHED_BATCH: woken, it never preempts the loop, a runtime or a
// tenant.
//
// The loop hands over a key and code and takes back loaded fds; the thread owns nothing
// else and calls nothing of the daemon's but `load` (a pure function of the code). Bounded:
// at most kMaxQueued loads queued or done and not yet taken. The thread starts on the first
// load asked for (a v1 node never starts it).
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstddef>
#include <deque>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "backend/device_program_code.h"
#include "core/result.h"

namespace gdw {

class ProgramLoadThread {
 public:
  static constexpr std::size_t kMaxQueued = 8;
  // Loads `code`; `what` names it in an error. Returns the program's fd.
  using LoadFn = Result<int> (*)(const BpfCode& code, const std::string& what);
  struct Loaded {
    std::string key;
    Result<int> fd;
  };

  explicit ProgramLoadThread(LoadFn load) : load_(load) {}
  ~ProgramLoadThread();  // stops after the load under way; closes every fd not taken
  ProgramLoadThread(const ProgramLoadThread&) = delete;
  ProgramLoadThread& operator=(const ProgramLoadThread&) = delete;

  // Queues the load of `code` under `key`. False: `key` is queued, loading or done and not
  // taken, or kMaxQueued loads are.
  bool submit(std::string key, BpfCode code, std::string what);
  // Whether `key` was submitted and not yet taken by take_done().
  bool has(const std::string& key) const;
  // The loop needs `key` now: a load of it under way is waited for, at most `limit` (the
  // thread had a head start); one still queued is taken out (the loop loads it sooner
  // itself). Whether it is done (take_done() has it).
  bool take_over(const std::string& key, std::chrono::microseconds limit);
  // The loads done since the last call (the caller owns their fds).
  std::vector<Loaded> take_done();
  // Whether the thread was started (a load was asked for).
  bool started() const { return thread_.joinable(); }

 private:
  struct Job {
    std::string key;
    BpfCode code;
    std::string what;
  };
  void run();
  bool has_locked(const std::string& key) const;

  const LoadFn load_;
  mutable std::mutex mutex_;
  std::condition_variable wake_;  // the thread: a job queued, or stop
  std::condition_variable done_;  // the loop: a load done
  std::deque<Job> queued_;
  std::string loading_;  // the key of the load under way, empty when none
  std::vector<Loaded> done_list_;
  bool stopping_ = false;
  std::thread thread_;
};

}  // namespace gdw
