#include "core/syscall_hook_schedule.h"

namespace gdw {

SyscallHookSchedule::SyscallHookSchedule(SyscallHookPolicy policy, std::chrono::milliseconds linger, bool observe)
    : policy_(policy), linger_(linger) {
  if (policy_ != SyscallHookPolicy::kAuto) return;
  policy_ = observe ? SyscallHookPolicy::kAlways : SyscallHookPolicy::kOnDrift;
  if (observe) always_reason_ = "always attached in observe mode: every denied open is counted";
}

SyscallHookSchedule::Decision SyscallHookSchedule::update(bool drift, Clock::time_point now) {
  switch (policy_) {
    case SyscallHookPolicy::kOff: return {false, std::nullopt, "probe.syscall_hook: off"};
    case SyscallHookPolicy::kAlways: return {true, std::nullopt, always_reason_};
    default: break;
  }
  if (drift) {
    drifting_ = true;
    drift_ended_.reset();
    return {true, std::nullopt, "a GPU container is missing devices"};
  }
  if (drifting_) {
    drifting_ = false;
    drift_ended_ = now;
  }
  if (drift_ended_ && now < *drift_ended_ + linger_)
    return {true, *drift_ended_ + linger_, "lingering after the last missing device came back"};
  drift_ended_.reset();
  return {false, std::nullopt, "no GPU container is missing devices"};
}

}  // namespace gdw
