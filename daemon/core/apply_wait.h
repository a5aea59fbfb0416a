// Never act inside a runtime's own apply: when a check may grant, whether it must wait
// first, and until when. Pure: what the processes and files say is looked up by the caller
// (service/apply_waits.h), time is passed in.
//
// Runtimes check their own work. runc (cgroup v1) writes `a` to devices.deny, then the
// spec's allows, then reads devices.list back and fails the start or update if it differs
// from the spec; on cgroup v2 it queries the attached programs, then replaces the one it
// saw (or attaches beside them and detaches the old ones), and fails with ENOENT if that
// program was swapped in between. A grant inside either window breaks the container. So a
// grant waits, for at most ApplyWaitSettings::limit from the first trigger it held:
// - for the process that revoked (the probe's record names it) to exit, when it is a
//   runtime or hook whose apply a grant can break (writer_waited_for: runc, crun, the
//   NVIDIA hook; short-lived, one process per apply). systemd re-applies with no check of
//   its own and never exits, and no other writer is known to check: those are answered at
//   once, as before. The name comes from the writer's comm, parent and executable, which a
//   tenant's own privileged process could imitate: it would only delay its own
//   container's repair, by at most the limit;
// - while the container's runtime create has not ended (its pid file not yet written:
//   under the systemd driver the first revoking write is systemd's, runc's follows);
// - without a named writer (the probe off, or its record lost), until the rule writes go
//   quiet for ApplyWaitSettings::quiet.
// A held check is made, whole (look, plan, grant), when its wait ends. Observe mode never
// waits: it writes nothing.
#pragma once

#include <sys/types.h>

#include <optional>
#include <string_view>

#include "core/clock.h"

namespace gdw {

struct ApplyWaitSettings {
  Clock::duration limit = std::chrono::seconds(1);       // repair.apply_wait_limit; 0: never wait
  Clock::duration quiet = std::chrono::milliseconds(5);  // repair.apply_quiet
  // While a create is pending its pid file is looked for this often (a writer's exit, when
  // the probe names one, ends the wait at once) ...
  Clock::duration create_poll = std::chrono::milliseconds(2);
  // ... or this often where the pid file's directory is watched (inotify says when the
  // runtime writes it, while it still runs: the look is a fallback only).
  Clock::duration create_poll_watched = std::chrono::milliseconds(100);
};

// What the caller found out for one check.
struct ApplyWaitInputs {
  // The process whose write revoked, as the probe named it since the last check, still
  // running, when writer_waited_for() its name.
  std::optional<pid_t> live_writer;
  bool create_pending = false;  // the runtime's create has not ended
  bool create_watched = false;  // ... and its pid file's directory is watched
  bool unnamed_write = false;   // this check answers a write whose writer nobody named
};

// Why a check waits, and how a wait ended (the metric's `until` label).
enum class ApplyWaitReason { kWriterExit, kCreate, kQuiet, kLimit };
inline constexpr ApplyWaitReason kApplyWaitReasons[] = {ApplyWaitReason::kWriterExit, ApplyWaitReason::kCreate,
                                                        ApplyWaitReason::kQuiet, ApplyWaitReason::kLimit};
std::string_view to_string(ApplyWaitReason r);  // writer_exit | create | quiet | limit

// What one container's waits keep between checks.
struct ApplyWaitState {
  std::optional<Clock::time_point> since;  // the first trigger held, while waiting
  Clock::time_point quiet_until{};
  ApplyWaitReason reason = ApplyWaitReason::kQuiet;  // of the current (or last) wait
};

struct ApplyWaitDecision {
  // Wait: look again at `recheck_at` at the latest (a writer's exit comes sooner).
  bool wait = false;
  Clock::time_point recheck_at{};
  // Not waiting (any more): a wait just ended, and how.
  std::optional<ApplyWaitReason> ended;
};

// Whether the check at `now` goes ahead. `trigger`: the oldest trigger it answers.
ApplyWaitDecision decide_apply_wait(ApplyWaitState& state, const ApplyWaitInputs& in, Clock::time_point trigger,
                                    Clock::time_point now, const ApplyWaitSettings& settings);

// Whether a grant waits for the exit of a writer recognised as `name` (core/writer_name.h).
bool writer_waited_for(std::string_view name);

}  // namespace gdw
