// When a stale checkpoint may be remediated (moved aside, kubelet restarted). Pure.
//
// Remediation restarts kubelet, which then re-admits every pod from what the plugins report:
// done wrongly it disturbs every running GPU workload on the node. So a staleness verdict
// only counts when
//   - it was made against a fresh inventory: the host re-read, and NVML asked again when
//     the verdict rests on MIG UUIDs (after a MIG geometry change the cached NVML answer
//     lists the old MIG devices, and the new ones look unknown). A refresh that failed
//     confirms nothing;
//   - it persists: a second fresh verdict at least `confirm_after` after the first;
//   - no running container holds a device the checkpoint names (a running pod's
//     allocation is evidence that the checkpoint is live, and restarting kubelet under it
//     is the disturbance to avoid).
#pragma once

#include <chrono>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "core/config.h"
#include "kubelet/checkpoint.h"
#include "node/stale_checkpoint.h"

namespace gdw {

enum class RemediationAction {
  kNone,              // not stale, or remediation is off
  kRefreshInventory,  // ask the host (and NVML) again, then decide again
  kWait,              // stale, confirmation pending: decide again at `recheck_at`
  kHold,              // stale, but held back (see `reason`); decide again at `recheck_at`
  kRemediate,
};

std::string_view to_string(RemediationAction action);

// Why a stale checkpoint is not remediated (yet). The strings are the metric's label
// values: a bounded set.
enum class RemediationHold { kNone, kInventoryUnconfirmed, kAwaitingConfirmation, kDevicesInUse };
std::string_view to_string(RemediationHold hold);
inline constexpr RemediationHold kRemediationHolds[] = {
    RemediationHold::kInventoryUnconfirmed, RemediationHold::kAwaitingConfirmation, RemediationHold::kDevicesInUse};

struct RemediationInputs {
  using TimePoint = std::chrono::steady_clock::time_point;
  bool stale = false;
  bool enabled = false;  // kubelet.remediate_stale_checkpoint
  // The verdict was made against an inventory refreshed for this check (not yet used by
  // an earlier one).
  bool inventory_fresh = false;
  // The last refresh asked for failed (NVML error or timeout): nothing confirms.
  bool refresh_failed = false;
  // When the checkpoint was first judged stale against a fresh inventory (same evidence).
  std::optional<TimePoint> stale_since;
  // No new check before this (the confirmation window, or the back-off after a hold),
  // and why it was set (the reason reported meanwhile).
  std::optional<TimePoint> next_check;
  RemediationHold pending_hold = RemediationHold::kNone;
  TimePoint now{};
  Duration confirm_after{300000};  // kubelet.stale_confirm_after
  // Running containers holding devices the checkpoint names ("uid/container"); empty: none.
  std::vector<std::string> holders;
};

struct RemediationDecision {
  RemediationAction action = RemediationAction::kNone;
  RemediationHold hold = RemediationHold::kNone;
  // kWait (the confirmation window starts now when stale_since was unset), kHold.
  std::optional<RemediationInputs::TimePoint> recheck_at;
  // This check starts the confirmation window: record `now` as stale_since.
  bool starts_window = false;
};

RemediationDecision decide_remediation(const RemediationInputs& in);

// A container cgroup the daemon discovered, as the holders check needs it.
struct RunningContainer {
  std::string pod_uid;                        // from the cgroup path (kernel-enforced)
  std::optional<std::string> container_name;  // from its runtime's bundle; unknown: nullopt
  bool has_processes = false;                 // cgroup.procs is not empty
};

// The running containers whose checkpoint entries (resources matching `resource_globs`)
// name devices, as "pod-uid/container" (sorted, unique). A container whose name is not
// known counts when any entry of its pod names devices: in doubt, it holds them.
std::vector<std::string> checkpoint_device_holders(const Checkpoint& checkpoint,
                                                   const std::vector<std::string>& resource_globs,
                                                   const std::vector<RunningContainer>& running);

// A key for "the same staleness": boot id mismatch and the unknown IDs. A new key starts
// the confirmation over.
std::string stale_evidence_key(const StaleCheckpointReport& report);

}  // namespace gdw
