#include "node/stale_remediation.h"

#include <set>

#include "core/desired_state.h"

namespace gdw {

std::string_view to_string(RemediationAction action) {
  switch (action) {
    case RemediationAction::kNone: return "none";
    case RemediationAction::kRefreshInventory: return "refresh the inventory";
    case RemediationAction::kWait: return "wait";
    case RemediationAction::kHold: return "hold";
    case RemediationAction::kRemediate: return "remediate";
  }
  return "none";
}

std::string_view to_string(RemediationHold hold) {
  switch (hold) {
    case RemediationHold::kNone: return "none";
    case RemediationHold::kInventoryUnconfirmed: return "inventory-unconfirmed";
    case RemediationHold::kAwaitingConfirmation: return "awaiting-confirmation";
    case RemediationHold::kDevicesInUse: return "devices-in-use";
  }
  return "none";
}

RemediationDecision decide_remediation(const RemediationInputs& in) {
  RemediationDecision d;
  if (!in.enabled || !in.stale) return d;
  auto wait = [&](RemediationAction action, RemediationHold hold, std::optional<RemediationInputs::TimePoint> at) {
    d.action = action;
    d.hold = hold;
    d.recheck_at = at;
    return d;
  };
  // Inside the window (or the back-off after a hold) nothing is asked again: a re-query
  // per resync would only load NVML for nothing.
  if (in.next_check && in.now < *in.next_check)
    return wait(RemediationAction::kWait,
                in.pending_hold != RemediationHold::kNone ? in.pending_hold : RemediationHold::kAwaitingConfirmation,
                in.next_check);
  if (!in.inventory_fresh) {
    if (in.refresh_failed)
      return wait(RemediationAction::kHold, RemediationHold::kInventoryUnconfirmed, in.now + in.confirm_after);
    return wait(RemediationAction::kRefreshInventory, RemediationHold::kInventoryUnconfirmed, std::nullopt);
  }
  if (!in.stale_since || in.now - *in.stale_since < in.confirm_after) {
    const auto since = in.stale_since.value_or(in.now);
    d = wait(RemediationAction::kWait, RemediationHold::kAwaitingConfirmation, since + in.confirm_after);
    d.starts_window = !in.stale_since;
    return d;
  }
  if (!in.holders.empty())
    return wait(RemediationAction::kHold, RemediationHold::kDevicesInUse, in.now + in.confirm_after);
  d.action = RemediationAction::kRemediate;
  return d;
}

std::vector<std::string> checkpoint_device_holders(const Checkpoint& checkpoint,
                                                   const std::vector<std::string>& resource_globs,
                                                   const std::vector<RunningContainer>& running) {
  std::set<std::pair<std::string, std::string>> with_devices;  // (pod uid, container)
  std::set<std::string> pods_with_devices;
  for (const auto& e : checkpoint.entries) {
    if (e.device_ids.empty() || !resource_matches(resource_globs, e.resource)) continue;
    with_devices.emplace(e.pod_uid, e.container_name);
    pods_with_devices.insert(e.pod_uid);
  }
  std::set<std::string> holders;
  for (const auto& c : running) {
    if (!c.has_processes || c.pod_uid.empty()) continue;
    const bool holds = c.container_name ? with_devices.count({c.pod_uid, *c.container_name}) > 0
                                        : pods_with_devices.count(c.pod_uid) > 0;
    if (holds) holders.insert(c.pod_uid + "/" + c.container_name.value_or("?"));
  }
  return {holders.begin(), holders.end()};
}

std::string stale_evidence_key(const StaleCheckpointReport& report) {
  if (!report.stale) return {};
  std::string key = report.boot_id_mismatch ? "boot:" + report.checkpoint_boot_id.value_or("") : "boot:same";
  for (const auto& id : report.unknown_ids) key += " " + id;
  return key;
}

}  // namespace gdw
