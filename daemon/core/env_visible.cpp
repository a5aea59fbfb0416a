#include "core/env_visible.h"

#include <algorithm>
#include <charconv>

namespace gdw {
namespace {

std::string_view trim(std::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t')) s.remove_prefix(1);
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t')) s.remove_suffix(1);
  return s;
}

bool all_digits(std::string_view s) {
  return !s.empty() && std::all_of(s.begin(), s.end(), [](char c) { return c >= '0' && c <= '9'; });
}

// GPU-/MIG- followed by hex digits and dashes (MIG-GPU-<uuid>/<gi>/<ci>, the pre-R470
// form, also carries slashes).
bool is_uuid(std::string_view s) {
  if (s.rfind("GPU-", 0) != 0 && s.rfind("MIG-", 0) != 0) return false;
  std::string_view rest = s.substr(4);
  return !rest.empty() && std::all_of(rest.begin(), rest.end(), [](char c) {
    return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f') || (c >= 'A' && c <= 'F') || c == '-' || c == '/' ||
           c == 'G' || c == 'P' || c == 'U';
  });
}

VisibleDevicesRequest refused(std::string why) {
  VisibleDevicesRequest r;
  r.error = std::move(why);
  return r;
}

}  // namespace

VisibleDevicesRequest parse_visible_devices(std::string_view value) {
  if (value.size() > kMaxVisibleDevicesValue)
    return refused("longer than " + std::to_string(kMaxVisibleDevicesValue) + " bytes");
  value = trim(value);
  VisibleDevicesRequest r;
  if (value.empty() || value == "none" || value == "void") return r;
  if (value == "all") {
    r.kind = VisibleDevicesRequest::Kind::kAll;
    return r;
  }
  r.kind = VisibleDevicesRequest::Kind::kList;
  std::size_t entries = 0;
  while (!value.empty()) {
    const auto comma = value.find(',');
    std::string_view entry = trim(value.substr(0, comma));
    value = comma == std::string_view::npos ? std::string_view() : value.substr(comma + 1);
    if (entry.empty()) continue;
    if (++entries > kMaxVisibleDevicesEntries)
      return refused("more than " + std::to_string(kMaxVisibleDevicesEntries) + " entries");
    if (all_digits(entry)) {
      std::uint32_t index = 0;
      auto [end, ec] = std::from_chars(entry.data(), entry.data() + entry.size(), index);
      if (ec != std::errc() || end != entry.data() + entry.size() || index > 1024)
        return refused("index '" + std::string(entry) + "' out of range");
      r.indices.push_back(index);
    } else if (is_uuid(entry)) {
      r.uuids.emplace_back(entry);
    } else if (auto colon = entry.find(':');
               colon != std::string_view::npos && all_digits(entry.substr(0, colon)) && all_digits(entry.substr(colon + 1))) {
      // <GPU index>:<MIG index>: MIG indices are NVML's enumeration order, which only NVML
      // itself knows: reported, never guessed.
      r.unsupported.push_back(std::string(entry) + ": MIG device index (use MIG UUIDs)");
    } else {
      return refused("entry '" + std::string(entry.substr(0, 64)) + "' is not a GPU index or UUID");
    }
  }
  if (r.indices.empty() && r.uuids.empty() && r.unsupported.empty()) r.kind = VisibleDevicesRequest::Kind::kNothing;
  return r;
}

std::vector<const GpuDevice*> gpus_in_nvml_order(const Inventory& inventory) {
  std::vector<const GpuDevice*> gpus;
  for (const auto& g : inventory.gpus)
    if (!g.excluded) gpus.push_back(&g);
  // NVML enumerates by PCI bus id; the fixed-width "dddd:bb:dd.f" form sorts as text.
  std::sort(gpus.begin(), gpus.end(), [](const GpuDevice* a, const GpuDevice* b) {
    return a->bus_location != b->bus_location ? a->bus_location < b->bus_location : a->minor < b->minor;
  });
  return gpus;
}

std::vector<std::string> visible_device_ids(const VisibleDevicesRequest& request, const Inventory& inventory,
                                            std::vector<std::string>& unresolved) {
  std::vector<std::string> ids;
  auto add = [&](const std::string& id) {
    if (std::find(ids.begin(), ids.end(), id) == ids.end()) ids.push_back(id);
  };
  const auto ordered = gpus_in_nvml_order(inventory);
  if (request.kind == VisibleDevicesRequest::Kind::kAll) {
    for (const GpuDevice* g : ordered) add(g->uuid);
    return ids;
  }
  for (std::uint32_t index : request.indices) {
    if (index < ordered.size()) {
      add(ordered[index]->uuid);
    } else {
      unresolved.push_back("NVIDIA_VISIBLE_DEVICES index " + std::to_string(index) + ": the node has " +
                           std::to_string(ordered.size()) + " GPU(s)");
    }
  }
  for (const auto& uuid : request.uuids) {
    const bool known = uuid.rfind("MIG-", 0) == 0 ? inventory.mig_by_uuid(uuid) != nullptr
                                                  : inventory.gpu_by_uuid(uuid) != nullptr;
    if (known) {
      add(uuid);
    } else {
      unresolved.push_back("NVIDIA_VISIBLE_DEVICES " + uuid + ": not on this node");
    }
  }
  for (const auto& u : request.unsupported) unresolved.push_back("NVIDIA_VISIBLE_DEVICES " + u);
  return ids;
}

std::optional<EnvVisibleGpus> env_visible_gpus(std::string_view value, const Inventory& inventory,
                                               const DesiredPolicy& policy) {
  EnvVisibleGpus out;
  out.value = std::string(value.substr(0, 256));
  const VisibleDevicesRequest request = parse_visible_devices(value);
  std::vector<std::string> unresolved;
  if (!request.error.empty()) unresolved.push_back("NVIDIA_VISIBLE_DEVICES refused: " + request.error);
  out.device_ids = visible_device_ids(request, inventory, unresolved);
  if (out.device_ids.empty() && unresolved.empty()) return std::nullopt;
  out.desired = desired_for_device_ids(out.device_ids, inventory, policy);
  out.desired.unresolved.insert(out.desired.unresolved.end(), unresolved.begin(), unresolved.end());
  return out;
}

}  // namespace gdw
