#include "core/desired_state.h"

#include <fnmatch.h>

#include <algorithm>
#include <map>

namespace gdw {
namespace {

// Fixed minors of NVIDIA control nodes (nvidia-devices.md), for a node that does not exist
// yet while its driver is registered in /proc/devices (seed: nvidia-uvm created after the
// device plugin started). `driver` is the /proc/devices name whose presence proves the
// device is there; nvidia-modeset has none of its own, so only an existing node counts.
struct KnownNode {
  const char* name;
  const char* driver;
  std::uint32_t minor;
};
constexpr KnownNode kKnownControlNodes[] = {
    {"nvidiactl", "nvidiactl", 255},
    {"nvidia-uvm", "nvidia-uvm", 0},
    {"nvidia-uvm-tools", "nvidia-uvm", 1},
    {"nvidia-nvswitchctl", "nvidia-nvswitch", 255},
};

class Collector {
 public:
  void add(DeviceNumber dev, std::uint8_t access, std::string name, std::string reason) {
    auto [it, inserted] = by_dev_.try_emplace(dev, WantedDevice{dev, access, std::move(name), std::move(reason)});
    if (!inserted) it->second.access |= access;
  }
  std::vector<WantedDevice> take() {
    std::vector<WantedDevice> out;
    out.reserve(by_dev_.size());
    for (auto& [dev, w] : by_dev_) out.push_back(std::move(w));
    return out;
  }

 private:
  std::map<DeviceNumber, WantedDevice> by_dev_;
};

std::optional<DeviceNumber> node_number(const Inventory& inv, const std::string& name,
                                        std::optional<std::uint32_t> major, std::uint32_t minor) {
  if (auto it = inv.dev_nodes.find(name); it != inv.dev_nodes.end()) return it->second;
  if (!major) return std::nullopt;
  return DeviceNumber{DeviceType::kChar, *major, minor};
}

std::optional<DeviceNumber> gpu_node(const Inventory& inv, std::uint32_t gpu_minor) {
  return node_number(inv, "nvidia" + std::to_string(gpu_minor), inv.nvidia_major(), gpu_minor);
}

std::optional<DeviceNumber> cap_node(const Inventory& inv, std::uint32_t cap_minor) {
  return node_number(inv, "nvidia-caps/nvidia-cap" + std::to_string(cap_minor), inv.char_major("nvidia-caps"),
                     cap_minor);
}

void add_gpu(Collector& out, DesiredDevices& desired, const Inventory& inv, const std::string& id) {
  const GpuDevice* gpu = inv.gpu_by_uuid(id);
  if (!gpu) {
    desired.unresolved.push_back(id + ": no such GPU on this node");
    return;
  }
  auto dev = gpu_node(inv, gpu->minor);
  if (!dev) {
    desired.unresolved.push_back(id + ": nvidia driver major unknown (/proc/devices)");
    return;
  }
  out.add(*dev, kAccessReadWrite, "nvidia" + std::to_string(gpu->minor), id);
}

void add_mig(Collector& out, DesiredDevices& desired, const Inventory& inv, const std::string& id) {
  const MigDevice* mig = inv.mig_by_uuid(id);
  if (!mig) {
    desired.unresolved.push_back(id + ": MIG device not mapped (no NVML answer and no devices.mig_map entry)");
    return;
  }
  auto gpu = gpu_node(inv, mig->gpu_minor);
  if (!gpu) {
    desired.unresolved.push_back(id + ": nvidia driver major unknown (/proc/devices)");
    return;
  }
  std::string gi_key = "gpu" + std::to_string(mig->gpu_minor) + "/gi" + std::to_string(mig->gpu_instance) + "/access";
  std::string ci_key = "gpu" + std::to_string(mig->gpu_minor) + "/gi" + std::to_string(mig->gpu_instance) + "/ci" +
                       std::to_string(mig->compute_instance) + "/access";
  auto gi = inv.mig_minors.find(gi_key);
  auto ci = inv.mig_minors.find(ci_key);
  if (gi == inv.mig_minors.end() || ci == inv.mig_minors.end()) {
    desired.unresolved.push_back(id + ": " + (gi == inv.mig_minors.end() ? gi_key : ci_key) +
                                 " not in nvidia-caps/mig-minors");
    return;
  }
  auto gi_dev = cap_node(inv, gi->second);
  auto ci_dev = cap_node(inv, ci->second);
  if (!gi_dev || !ci_dev) {
    desired.unresolved.push_back(id + ": nvidia-caps major unknown (/proc/devices)");
    return;
  }
  out.add(*gpu, kAccessReadWrite, "nvidia" + std::to_string(mig->gpu_minor), id);
  out.add(*gi_dev, kAccessReadWrite, "nvidia-caps/nvidia-cap" + std::to_string(gi->second), id + " gi access");
  out.add(*ci_dev, kAccessReadWrite, "nvidia-caps/nvidia-cap" + std::to_string(ci->second), id + " ci access");
}

void add_device_spec(Collector& out, DesiredDevices& desired, const Inventory& inv, const DeviceSpec& spec) {
  constexpr std::string_view kDev = "/dev/";
  if (spec.host_path.rfind(kDev, 0) != 0) {
    desired.unresolved.push_back("DeviceSpec " + spec.host_path + ": not under /dev");
    return;
  }
  std::string name = spec.host_path.substr(kDev.size());
  auto it = inv.dev_nodes.find(name);
  if (it == inv.dev_nodes.end()) {
    desired.unresolved.push_back("DeviceSpec " + spec.host_path + ": no such device node");
    return;
  }
  auto access = parse_access(spec.permissions);
  // A DeviceSpec's permissions go to the container unchanged; `m` included if asked for.
  out.add(it->second, access ? *access : std::uint8_t{kAccessReadWrite}, name, "DeviceSpec " + spec.host_path);
}

// A CDI device's nodes. `reason` says where the name came from.
void add_cdi(Collector& out, DesiredDevices& desired, const Inventory& inv, const std::string& cdi_name,
             const std::string& reason) {
  auto it = inv.cdi_devices.find(cdi_name);
  if (it == inv.cdi_devices.end()) {
    desired.unresolved.push_back("CDI device " + cdi_name + " (" + reason + "): no CDI spec in cdi.spec_dirs defines it");
    desired.unresolved_cdi.push_back(cdi_name);
    return;
  }
  constexpr std::string_view kDev = "/dev/";
  for (const auto& node : it->second) {
    const bool under_dev = node.host_path.rfind(kDev, 0) == 0;
    std::string name = under_dev ? node.host_path.substr(kDev.size()) : node.host_path;
    std::optional<DeviceNumber> dev = node.number;
    if (!dev && under_dev) {
      if (auto found = inv.dev_nodes.find(name); found != inv.dev_nodes.end()) dev = found->second;
    }
    if (!dev) {
      desired.unresolved.push_back("CDI device " + cdi_name + ": " + node.host_path +
                                   " is no character device under devices.dev_root");
      continue;
    }
    auto access = parse_access(node.permissions);
    out.add(*dev, access ? *access : std::uint8_t{kAccessReadWrite}, std::move(name), "CDI " + cdi_name);
  }
}

// A device plugin's CDI names: AllocResp cdi_devices (deviceListStrategy cdi-cri) and the
// values of its `cdi.k8s.io/` annotations (cdi-annotations: comma-separated names). Both
// are the plugin's reply as kubelet stored it, never the pod's own annotations.
std::vector<std::string> alloc_resp_cdi_names(const AllocationEntry& entry) {
  std::vector<std::string> names = entry.cdi_devices;
  for (const auto& [key, value] : entry.annotations) {
    if (key.rfind("cdi.k8s.io/", 0) != 0) continue;
    std::size_t start = 0;
    while (start <= value.size()) {
      std::size_t comma = value.find(',', start);
      if (comma == std::string::npos) comma = value.size();
      if (comma > start) names.push_back(value.substr(start, comma - start));
      start = comma + 1;
    }
  }
  return names;
}

std::optional<DeviceNumber> control_node(const Inventory& inv, const std::string& name) {
  if (auto it = inv.dev_nodes.find(name); it != inv.dev_nodes.end()) return it->second;
  for (const auto& known : kKnownControlNodes) {
    if (name != known.name) continue;
    if (auto major = inv.char_major(known.driver)) return DeviceNumber{DeviceType::kChar, *major, known.minor};
  }
  return std::nullopt;
}

}  // namespace

bool resource_matches(const std::vector<std::string>& globs, const std::string& resource) {
  return std::any_of(globs.begin(), globs.end(),
                     [&](const std::string& g) { return ::fnmatch(g.c_str(), resource.c_str(), 0) == 0; });
}

bool is_dra(const AllocationEntry& entry) { return !entry.dra_claim.empty(); }

bool entry_watched(const DesiredPolicy& policy, const AllocationEntry& entry) {
  return is_dra(entry) ? resource_matches(policy.dra_driver_globs, entry.resource)
                       : resource_matches(policy.resource_globs, entry.resource);
}

std::string strip_replica_suffix(const std::string& device_id) {
  auto pos = device_id.find("::");
  return pos == std::string::npos ? device_id : device_id.substr(0, pos);
}

DesiredDevices compute_desired(const std::vector<AllocationEntry>& entries, const Inventory& inventory,
                               const DesiredPolicy& policy) {
  DesiredDevices desired;
  Collector out;
  bool device_plugin_gpu = false;  // control nodes go with these only
  for (const auto& entry : entries) {
    if (!entry_watched(policy, entry)) continue;
    if (is_dra(entry)) {
      if (entry.cdi_devices.empty()) continue;
      desired.holds_gpu = true;
      for (const auto& name : entry.cdi_devices)
        add_cdi(out, desired, inventory, name, "DRA claim " + entry.dra_claim + " of " + entry.resource);
      continue;
    }
    const std::vector<std::string> cdi_names = alloc_resp_cdi_names(entry);
    if (entry.device_ids.empty() && entry.device_specs.empty() && cdi_names.empty()) continue;
    desired.holds_gpu = true;
    device_plugin_gpu = true;
    for (const auto& raw_id : entry.device_ids) {
      std::string id = strip_replica_suffix(raw_id);
      if (id.rfind("MIG-", 0) == 0) {
        add_mig(out, desired, inventory, id);
      } else {
        add_gpu(out, desired, inventory, id);
      }
    }
    for (const auto& spec : entry.device_specs) add_device_spec(out, desired, inventory, spec);
    for (const auto& name : cdi_names) add_cdi(out, desired, inventory, name, entry.resource + " AllocResp");
  }
  if (device_plugin_gpu) {
    for (const auto& name : policy.control_names) {
      // A control node that neither exists nor has its driver registered is not on this
      // host: nothing to grant.
      if (auto dev = control_node(inventory, name)) out.add(*dev, kAccessReadWrite, name, "control");
    }
  }
  desired.wanted = out.take();
  std::sort(desired.unresolved.begin(), desired.unresolved.end());
  desired.unresolved.erase(std::unique(desired.unresolved.begin(), desired.unresolved.end()),
                           desired.unresolved.end());
  std::sort(desired.unresolved_cdi.begin(), desired.unresolved_cdi.end());
  desired.unresolved_cdi.erase(std::unique(desired.unresolved_cdi.begin(), desired.unresolved_cdi.end()),
                               desired.unresolved_cdi.end());
  return desired;
}

DesiredDevices desired_for_device_ids(const std::vector<std::string>& device_ids, const Inventory& inventory,
                                      const DesiredPolicy& policy) {
  AllocationEntry entry;
  entry.resource = "NVIDIA_VISIBLE_DEVICES";
  entry.device_ids = device_ids;
  DesiredPolicy any_resource = policy;
  any_resource.resource_globs = {entry.resource};
  return compute_desired({entry}, inventory, any_resource);
}

std::vector<WantedDevice> missing_devices(const DesiredDevices& desired, const DeviceList& actual) {
  std::vector<WantedDevice> missing;
  for (const auto& w : desired.wanted) {
    if (!device_list_allows(actual, w.dev, w.access)) missing.push_back(w);
  }
  return missing;
}

std::vector<DeviceRule> grant_rules(const std::vector<WantedDevice>& missing) {
  std::vector<DeviceRule> rules;
  rules.reserve(missing.size());
  for (const auto& w : missing) rules.push_back(DeviceRule{w.dev.type, w.dev.major, w.dev.minor, w.access});
  return rules;
}

}  // namespace gdw
