// When the probe's syscall hook should be attached. The hook (tp_btf/sys_exit) sees denied
// opens, exact cgroup v2 program changes and rule-write results, but slows every syscall
// on the node while attached. So by default (`auto`) the hook is attached while a GPU
// container is missing a device it should have (that is when its opens fail), and for a
// linger period after, so a flapping container does not attach/detach it each time. No
// kernel makes `auto` keep it attached for good: rule writers are named by the always-on
// part of the probe (at the permission check from 6.14, on the devices controller's write
// path where the kernel allows fexit), and where neither can be had their attribution
// degrades (named only while the hook is attached) rather than every syscall of the node
// paying for it. In observe mode nothing is repaired and the denied opens are what a user
// watches for: `auto` keeps the hook attached from the start there, so even the first opens
// after a revocation are counted (a hook attached on drift comes a few milliseconds late).
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

  // observe: mode observe, where `auto` keeps the hook attached.
  SyscallHookSchedule(SyscallHookPolicy policy, std::chrono::milliseconds linger, bool observe = false);

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
