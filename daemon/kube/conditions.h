// Node conditions (node-problem-detector conventions: "True" = the problem is present) and
// the pod readiness gate gpu-devwatch.io/devices-ready, decided from what the daemon sees of
// its GPU containers. Pure: no I/O; times are arguments.
//
// The daemon hands in a DeviceAccessState whenever it recounts its container gauges: only
// the containers that do not hold their devices now (O(such containers) to fill), plus the
// two node faults. How long each has been so is tracked here (ProblemClock), so the grace
// survives the snapshot's plainness and a reporter rebuilt on SIGHUP.
#pragma once

#include <array>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "core/clock.h"
#include "kube/event_model.h"

namespace gdw::kube {

// A container that does not hold its allocated devices now.
struct ContainerProblem {
  enum class Kind {
    kMissingDevices,  // a GPU container missing some (observe mode, refused, held back, unwrappable)
    kUnidentified,    // a container of a pod holding devices, not identified (so not checked)
  };
  std::string key;  // what identifies the container over time: its cgroup directory
  PodRef pod;       // UID from the cgroup path; namespace and name when known
  std::string container;
  Kind kind = Kind::kMissingDevices;
};

struct DeviceAccessState {
  std::vector<ContainerProblem> problems;
  bool checkpoint_stale = false;
  std::vector<std::string> unresponsive_plugins;  // device plugin sockets
  // Every container has been checked (after the allocation records' first answers) and both
  // node faults judged. Until then none of the above is a verdict, and nothing is judged.
  bool checked = false;
};

// Since when each problem container has been one (the first snapshot that listed it).
class ProblemClock {
 public:
  void observe(const DeviceAccessState& state, Clock::time_point now);
  // The problems that have lasted longer than `grace` at `now`.
  std::vector<const ContainerProblem*> lasting(Clock::time_point now, Clock::duration grace) const;
  // When the next problem outlasts `grace`; nullopt when none will without a new snapshot.
  std::optional<Clock::time_point> next_expiry(Clock::time_point now, Clock::duration grace) const;
  // The problems of the pod `pod_uid` (every problem: empty) count as problems since
  // `since` at the latest: what was already reported before a restart keeps its grace.
  void backdate(const std::string& pod_uid, Clock::time_point since);
  const DeviceAccessState& state() const { return state_; }

 private:
  DeviceAccessState state_;
  std::map<std::string, Clock::time_point> since_;
};

enum class NodeConditionType { kDeviceAccessDegraded, kAllocationRecordStale, kDevicePluginUnresponsive };
inline constexpr std::size_t kNodeConditionCount = 3;
const char* condition_type_name(NodeConditionType type);  // GPUDeviceAccessDegraded, ...

struct ConditionState {
  bool status = false;  // "True" (a node condition: the problem is present; the gate: ready)
  std::string reason;
  std::string message;
  WallClock::time_point last_transition{};
  bool operator==(const ConditionState&) const = default;
};
using NodeConditions = std::array<ConditionState, kNodeConditionCount>;

// The three conditions as `clock` has them now (last_transition not set).
NodeConditions judge_node(const ProblemClock& clock, Clock::time_point now, Clock::duration grace);

// The gate of the pod with `pod_uid`: false once one of its containers has been a problem
// longer than `grace`, true otherwise.
bool gate_ready(const ProblemClock& clock, const std::string& pod_uid, Clock::time_point now, Clock::duration grace);
// The gate condition's reason and message.
ConditionState gate_condition(const ProblemClock& clock, const std::string& pod_uid, bool ready, Clock::time_point now,
                              Clock::duration grace);

// The gate of a pod as a whole. "True" only once the pod runs with every container it
// declares started (`started`, from the pod watch), a check of the node's containers came
// after that (`checked`), none of its containers is unidentified (not checkable) and none
// has missed devices past the grace.
struct GateVerdict {
  ConditionState condition;
  // A "False" that must reach the API server even where the pod has no gate condition yet
  // (devices missing past the grace). A "False" that only says "not yet" (not started, not
  // checked) is written only over a "True": an absent gate keeps the pod unready already.
  bool firm = false;
};
GateVerdict judge_gate(const ProblemClock& clock, const std::string& pod_uid, bool started, bool checked,
                       Clock::time_point now, Clock::duration grace);

// `current` with last_transition carried from `before` when the status did not change,
// else `at`.
ConditionState with_transition(ConditionState current, const std::optional<ConditionState>& before,
                               WallClock::time_point at);

// The strategic-merge patch of a node's status carrying `conditions` (all three), with
// lastHeartbeatTime `heartbeat`.
std::string node_status_patch(const NodeConditions& conditions, WallClock::time_point heartbeat);
std::string node_status_path(const std::string& node);
// The patch of a pod's status carrying the gate condition; metadata.uid makes the API
// server refuse it for another pod of the same name (the UID is immutable).
std::string pod_status_patch(const PodRef& pod, const ConditionState& gate, WallClock::time_point probe);
std::string pod_status_path(const PodRef& pod);

}  // namespace gdw::kube
