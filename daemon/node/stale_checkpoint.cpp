#include "node/stale_checkpoint.h"

#include <set>

#include "core/desired_state.h"
#include "node/node_model.h"

namespace gdw {
namespace {

enum class DeviceVerdict { kKnown, kUnknown, kUnverifiable };

DeviceVerdict judge_device(const std::string& id, const Inventory& inventory) {
  if (id.rfind("GPU-", 0) == 0) {
    if (inventory.gpu_by_uuid(id) != nullptr) return DeviceVerdict::kKnown;
    return inventory.gpus.empty() ? DeviceVerdict::kUnverifiable : DeviceVerdict::kUnknown;
  }
  if (id.rfind("MIG-", 0) == 0) {
    if (inventory.mig_by_uuid(id) != nullptr) return DeviceVerdict::kKnown;
    return inventory.mig_source == "nvml" ? DeviceVerdict::kUnknown : DeviceVerdict::kUnverifiable;
  }
  return DeviceVerdict::kUnverifiable;
}

std::string join(const std::set<std::string>& ids) {
  std::string out;
  for (const auto& id : ids) out += (out.empty() ? "" : ", ") + id;
  return out;
}

}  // namespace

StaleCheckpointReport detect_stale_checkpoint(const Checkpoint& checkpoint, const Inventory& inventory,
                                              const std::optional<std::string>& running_boot_id,
                                              const std::vector<std::string>& resource_globs) {
  StaleCheckpointReport report;
  report.checkpoint_boot_id = checkpoint.boot_id;
  report.running_boot_id = running_boot_id;
  if (checkpoint.boot_id && running_boot_id && *checkpoint.boot_id != *running_boot_id) {
    report.boot_id_mismatch = true;
    report.reasons.push_back("checkpoint written in boot " + *checkpoint.boot_id + ", host running boot " +
                             *running_boot_id);
  }

  std::set<std::string> unknown_registered, unknown_allocated, unverifiable;
  auto check = [&](const std::string& raw_id, std::set<std::string>& unknown_into) {
    std::string id = strip_replica_suffix(raw_id);
    switch (judge_device(id, inventory)) {
      case DeviceVerdict::kKnown: break;
      case DeviceVerdict::kUnknown: unknown_into.insert(id); break;
      case DeviceVerdict::kUnverifiable: unverifiable.insert(id); break;
    }
  };
  for (const auto& [resource, ids] : checkpoint.registered_devices) {
    if (!resource_matches(resource_globs, resource)) continue;
    for (const auto& id : ids) check(id, unknown_registered);
  }
  for (const auto& entry : checkpoint.entries) {
    if (!resource_matches(resource_globs, entry.resource)) continue;
    for (const auto& id : entry.device_ids) check(id, unknown_allocated);
  }
  if (!unknown_registered.empty()) {
    report.reasons.push_back("RegisteredDevices names devices this host does not have: " + join(unknown_registered));
  }
  if (!unknown_allocated.empty()) {
    report.reasons.push_back("pod entries hold devices this host does not have: " + join(unknown_allocated));
  }
  std::set<std::string> unknown = unknown_registered;
  unknown.insert(unknown_allocated.begin(), unknown_allocated.end());
  report.unknown_ids.assign(unknown.begin(), unknown.end());
  report.unverifiable_ids.assign(unverifiable.begin(), unverifiable.end());
  report.stale = report.boot_id_mismatch || !report.unknown_ids.empty();
  return report;
}

Result<std::string> parse_boot_id(std::string_view text) {
  const auto first = text.find_first_not_of(" \t\n");
  if (first == std::string_view::npos) return Error{"boot id is empty"};
  const auto last = text.find_last_not_of(" \t\n");
  std::string_view id = text.substr(first, last - first + 1);
  if (id.find_first_of(" \t\n") != std::string_view::npos) {
    return Error{"boot id '" + std::string(id) + "' is not a single word"};
  }
  return std::string(id);
}

Result<std::string> read_boot_id(const std::string& proc_root) {
  const std::string path = proc_root + "/sys/kernel/random/boot_id";
  auto text = read_text_file(path, 4096);
  if (!text) return text.error();
  auto id = parse_boot_id(*text);
  if (!id) return with_context(path, id.error());
  return id;
}

}  // namespace gdw
