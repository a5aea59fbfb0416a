// Who revoked: the probe's records of writes that took devices away, and which repair each
// one explains. Pure: time is passed in.
//
// A repair names a writer when the probe saw a revoking write at most kAttributionWindow
// before the repair's trigger (the probe's kernel timestamps and the trigger's are both
// CLOCK_MONOTONIC), or when the write was handed to the repair as its cause. A container
// revoked before it is known as a GPU container (created after READY, its allocation record
// a moment late) keeps its deny-rule writes as PendingRevocations, bounded in number and age,
// until it becomes one and its first repair adopts the write that explains what is missing.
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <deque>
#include <optional>
#include <string>
#include <vector>

#include "core/clock.h"
#include "core/desired_state.h"
#include "core/device_rule.h"

namespace gdw {

// A revocation the probe saw at most this long before a repair's trigger caused it.
inline constexpr std::chrono::seconds kAttributionWindow{1};

struct Revocation {
  std::string writer;  // recognised name (bounded: the metric label)
  // Who it was and what it did, kept apart: describe() formats them only for a line that
  // goes out (most repairs of a storm log none).
  pid_t pid = 0;
  std::string comm, exe, parent_comm;
  // The process's start (ns since boot; pid + this is unique), and whether `exe` is still
  // to be read: a device program change's is read after its repair's grant, not before.
  std::uint64_t start_time_ns = 0;
  bool exe_unread = false;
  std::string action;  // "loading a device program"; empty for a rule write (`rule_text`)
  std::string rule_text;  // rule writes: the deny rule as written
  Clock::time_point at{};
  pid_t tid = 0;               // rule writes: the writing thread and the probe's
  std::uint64_t ktime_ns = 0;  // timestamp, to match the result that may follow
  std::optional<DeviceRule> rule;  // rule writes: the deny rule written
  // Set when a repair took this as its cause: it names that repair whatever the delay.
  std::optional<Clock::time_point> cause_of;
};

// "<writer> (pid <pid>, comm <comm>[, <exe>], parent <comm>) <what it did>": for log lines
// and Events.
std::string describe(const Revocation& r);

// Whether a revocation seen at `at` can be what a repair triggered at `trigger` answered:
// it came first, and not long before.
bool explains(Clock::time_point at, Clock::time_point trigger);
// Whether the repair triggered at `trigger` names `r` as who revoked.
bool names_repair(const Revocation& r, Clock::time_point trigger);

// Whether a deny rule takes away access some wanted device needs.
bool rule_revokes(const DeviceRule& deny, const std::vector<WantedDevice>& wanted);

// Deny-rule writes to a container not (yet) known as a GPU container.
class PendingRevocations {
 public:
  static constexpr std::size_t kMaxKept = 4;
  // Longer than PodResources' polling interval (kubelet.pod_resources_interval, 10 s by
  // default): the allocation record can be that late.
  static constexpr std::chrono::seconds kMaxAge{30};

  void add(Revocation r, Clock::time_point now);
  // The write's result said it failed: it revoked nothing.
  void withdraw(pid_t tid, std::uint64_t ktime_ns);
  // The newest kept write that revokes one of `missing`, no older than kMaxAge; everything
  // kept is dropped (a container's first repair as a GPU container settles them).
  std::optional<Revocation> take_explaining(const std::vector<WantedDevice>& missing, Clock::time_point now);
  void clear() { kept_.clear(); }
  bool empty() const { return kept_.empty(); }
  std::size_t size() const { return kept_.size(); }

 private:
  void expire(Clock::time_point now);
  std::deque<Revocation> kept_;  // oldest first
};

}  // namespace gdw
