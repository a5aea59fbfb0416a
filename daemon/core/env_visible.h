// GPUs a container reaches through NVIDIA_VISIBLE_DEVICES alone (an image that sets it, no
// GPU limit): the NVIDIA container runtime hook grants whatever the variable names at
// start, unless accept-nvidia-visible-devices-envvar-when-unprivileged=false. Pure: the
// variable's value and the inventory are inputs.
//
// The value is tenant input (the image or the pod spec sets it): parse_visible_devices()
// looks at a bounded prefix of it only and never resolves anything outside the inventory.
#pragma once

#include <cstddef>
#include <string>
#include <string_view>
#include <vector>

#include "core/desired_state.h"
#include "core/model.h"

namespace gdw {

// Bounds on tenant input: a longer value is refused as a whole, more entries are refused.
inline constexpr std::size_t kMaxVisibleDevicesValue = 4096;
inline constexpr std::size_t kMaxVisibleDevicesEntries = 64;

struct VisibleDevicesRequest {
  enum class Kind {
    kNothing,  // none, void, empty, or unset: no GPU
    kAll,      // all
    kList,     // comma-separated UUIDs (GPU-…, MIG-…) and indices
  } kind = Kind::kNothing;
  std::vector<std::string> uuids;        // GPU-…, MIG-…, as written
  std::vector<std::uint32_t> indices;    // NVML order (= PCI bus order)
  std::vector<std::string> unsupported;  // entries named but not resolvable here ("0:1" MIG indices)
  std::string error;                     // why the value was refused (too long, junk); kind is kNothing then
};

// What NVIDIA_VISIBLE_DEVICES=<value> asks for. Whitespace around entries is ignored; an
// entry that is neither a UUID, an index nor a MIG index refuses the whole value (the hook
// fails such a container's start too).
VisibleDevicesRequest parse_visible_devices(std::string_view value);

// The GPUs of the node in NVML order: sorted by PCI bus id, excluded GPUs left out.
std::vector<const GpuDevice*> gpus_in_nvml_order(const Inventory& inventory);

// The device IDs (GPU-…/MIG-… UUIDs) `request` names on this node; `unresolved` collects
// indices and UUIDs the node does not have.
std::vector<std::string> visible_device_ids(const VisibleDevicesRequest& request, const Inventory& inventory,
                                            std::vector<std::string>& unresolved);

// What an env-only container is reported with and, under devices.env_visible: restore,
// granted: its GPUs (through desired_for_device_ids(), control nodes included).
struct EnvVisibleGpus {
  std::string value;                 // NVIDIA_VISIBLE_DEVICES as the bundle states it (bounded)
  std::vector<std::string> device_ids;
  DesiredDevices desired;            // the GPUs' nodes + control nodes
  bool restored = false;             // devices.env_visible: restore made them the desired set
  bool operator==(const EnvVisibleGpus&) const = default;
};

// nullopt when the value names no GPU here and nothing unresolved (none, void, empty).
std::optional<EnvVisibleGpus> env_visible_gpus(std::string_view value, const Inventory& inventory,
                                               const DesiredPolicy& policy);

}  // namespace gdw
