// Plain data shared by the parsers, the node model and the decision core.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "core/device_rule.h"

namespace gdw {

// A DeviceSpec from the device plugin's Allocate reply (passDeviceSpecs=true).
struct DeviceSpec {
  std::string container_path;
  std::string host_path;
  std::string permissions;  // "rw", "rwm"
  bool operator==(const DeviceSpec&) const = default;
};

// A device node that a CDI device's containerEdits add (its own and its spec's).
struct CdiDeviceNode {
  std::string host_path;               // absolute (hostPath, else path)
  std::optional<DeviceNumber> number;  // from the spec's major/minor; else stat() of host_path
  std::string permissions;             // as the spec says ("rw", "rwm"); empty: rw
  bool operator==(const CdiDeviceNode&) const = default;
};

// What kubelet recorded for one (pod, container, resource), or for one DRA claim's devices
// of one driver (dra_claim set; resource is then the driver name, cdi_devices the names).
struct AllocationEntry {
  std::string pod_uid;
  std::string container_name;
  std::string resource;
  // Deduplicated, replica suffix (`::n`) stripped, in first-seen order.
  std::vector<std::string> device_ids;
  // Decoded AllocResp (ContainerAllocateResponse).
  std::map<std::string, std::string> envs;
  std::vector<DeviceSpec> device_specs;
  std::vector<std::string> cdi_devices;
  std::map<std::string, std::string> annotations;
  // Set when AllocResp was present but could not be decoded; device_ids still count.
  std::optional<std::string> alloc_resp_error;
  // DRA (PodResources dynamic_resources): "<claim namespace>/<claim name>"; empty for a
  // device plugin's entry.
  std::string dra_claim;
};

struct GpuDevice {
  std::string uuid;          // GPU-…
  std::uint32_t minor = 0;   // "Device Minor" = N of /dev/nvidiaN
  std::string bus_location;  // 0000:0f:00.0
  std::string model;
  bool excluded = false;
  bool operator==(const GpuDevice&) const = default;
};

// A MIG device and where it lives: parent GPU minor, GPU instance, compute instance.
struct MigDevice {
  std::string uuid;  // MIG-…
  std::uint32_t gpu_minor = 0;
  std::uint32_t gpu_instance = 0;
  std::uint32_t compute_instance = 0;
  bool operator==(const MigDevice&) const = default;
};

// What the host has: driver majors, GPUs, MIG capability minors, existing device nodes.
struct Inventory {
  // Character-device majors by driver name, from /proc/devices.
  std::map<std::string, std::uint32_t> char_majors;
  std::vector<GpuDevice> gpus;
  // mig-minors: "gpu0/gi1/access" → 12, "gpu0/gi1/ci0/access" → 13, "config" → 1.
  std::map<std::string, std::uint32_t> mig_minors;
  std::vector<MigDevice> migs;
  // Existing nodes under dev_root, by path relative to it ("nvidia0", "nvidia-uvm",
  // "nvidia-caps/nvidia-cap12") → the st_rdev that stat() reported.
  std::map<std::string, DeviceNumber> dev_nodes;
  // The CDI devices the spec files in cdi.spec_dirs define: fully qualified name
  // ("nvidia.com/gpu=0") → its device nodes, the spec-level ones included.
  std::map<std::string, std::vector<CdiDeviceNode>> cdi_devices;
  // Where MIG mappings came from ("nvml", "config", "none") and non-fatal problems.
  std::string mig_source = "none";
  std::vector<std::string> problems;

  // The major of /dev/nvidiaN: "nvidia" (driver ≥ 550.40) or "nvidia-frontend".
  bool operator==(const Inventory&) const = default;

  std::optional<std::uint32_t> nvidia_major() const;
  std::optional<std::uint32_t> char_major(const std::string& name) const;
  const GpuDevice* gpu_by_uuid(const std::string& uuid) const;
  const MigDevice* mig_by_uuid(const std::string& uuid) const;
};

}  // namespace gdw
