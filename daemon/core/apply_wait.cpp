#include "core/apply_wait.h"

#include <algorithm>

namespace gdw {

std::string_view to_string(ApplyWaitReason r) {
  switch (r) {
    case ApplyWaitReason::kWriterExit: return "writer_exit";
    case ApplyWaitReason::kCreate: return "create";
    case ApplyWaitReason::kQuiet: return "quiet";
    case ApplyWaitReason::kLimit: return "limit";
  }
  return "quiet";
}

namespace {

ApplyWaitDecision end_wait(ApplyWaitState& state, ApplyWaitReason how) {
  ApplyWaitDecision d;
  if (state.since) d.ended = how;
  state.since.reset();
  return d;
}

ApplyWaitDecision keep_waiting(ApplyWaitState& state, ApplyWaitReason why, Clock::time_point at, Clock::time_point limit) {
  state.reason = why;
  ApplyWaitDecision d;
  d.wait = true;
  d.recheck_at = std::min(at, limit);
  return d;
}

}  // namespace

ApplyWaitDecision decide_apply_wait(ApplyWaitState& state, const ApplyWaitInputs& in, Clock::time_point trigger,
                                    Clock::time_point now, const ApplyWaitSettings& settings) {
  if (in.unnamed_write) state.quiet_until = std::max(state.quiet_until, now + settings.quiet);
  if (settings.limit <= Clock::duration::zero()) return end_wait(state, state.reason);
  const Clock::time_point since = state.since ? std::min(*state.since, trigger) : trigger;
  const Clock::time_point limit = since + settings.limit;
  const bool writer_running = in.live_writer.has_value();
  const bool quiet_pending = now < state.quiet_until;
  if (!writer_running && !in.create_pending && !quiet_pending) return end_wait(state, state.reason);
  // Bounded: a writer that never exits (a tenant's own process), a runtime that never
  // writes its pid file, a write every few milliseconds: the grant goes out all the same.
  if (now >= limit) return end_wait(state, ApplyWaitReason::kLimit);
  state.since = since;
  if (writer_running) return keep_waiting(state, ApplyWaitReason::kWriterExit, limit, limit);
  if (in.create_pending)
    return keep_waiting(state, ApplyWaitReason::kCreate,
                        now + (in.create_watched ? settings.create_poll_watched : settings.create_poll), limit);
  return keep_waiting(state, ApplyWaitReason::kQuiet, state.quiet_until, limit);
}

// Runtimes and hooks whose own apply a grant can break, one short-lived process each.
constexpr std::string_view kWaitedForWriters[] = {"runc", "crun", "nvidia-container-toolkit"};

bool writer_waited_for(std::string_view name) {
  return std::find(std::begin(kWaitedForWriters), std::end(kWaitedForWriters), name) != std::end(kWaitedForWriters);
}

}  // namespace gdw
