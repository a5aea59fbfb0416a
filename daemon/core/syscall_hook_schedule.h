// When the probe's syscall hook should be attached. The hook (tp_btf/sys_exit) sees denied
// opens, exact cgroup v2 program changes and rule-write results, but slows every syscall
// on the node while attached; the always-on part of the probe names rule writers without
// it on kernels with the cap_capable tracepoint. So by default the hook is attached while
// a GPU container is missing a device it should have (that is when its opens fail), and
// for a linger period after, so a flapping container does not attach/detach it each time.
// In observe mode nothing is repaired and the denied opens are what a user watches for:
// `auto` keeps the hook attached from the start, so even the first opens after a
// revocation are counted (a hook attached on drift comes a few milliseconds late).
#pragma once

#include <chrono>
#include <optional>

#include "core/clock.h"
#include "core/config.h"

namespace gdw {

class SyscallHookSchedule {
 public:
  struct Decision {
    bool attached = false;
    // Decide again at this time (the linger ends) even if nothing else happens.
    std::optional<Clock::time_point> recheck_at;
    // Why, for the log line when the state changes.
    const char* reason = "";
  };

  // rule_writes_need_hook: the probe sees rule writes only through the hook (no
  // cap_capable tracepoint), which makes `auto` attach it permanently where the node has
  // rule files; so does `observe` (mode: observe).
  // rule_files: the node's device policy is in rule files (cgroup v1), or where it is is
  // not known yet. false on a cgroup v2 node: there are no rule writes to see, and `auto`
  // attaches the hook only on drift whatever the kernel. The owner builds the schedule
  // again once the node's cgroup version is located.
  SyscallHookSchedule(SyscallHookPolicy policy, std::chrono::milliseconds linger, bool rule_writes_need_hook,
                      bool observe = false, bool rule_files = true);

  // `drift`: some GPU container is missing a device it should have, as of `now`.
  Decision update(bool drift, Clock::time_point now);

 private:
  SyscallHookPolicy policy_;
  const char* always_reason_ = "always attached";
  std::chrono::milliseconds linger_;
  bool drifting_ = false;
  std::optional<Clock::time_point> drift_ended_;
};

}  // namespace gdw
