// Which device nodes a container must be able to open, from its allocation record and
// what the host has. Pure: the inventory (including stat() results) is an input.
#pragma once

#include <string>
#include <vector>

#include "core/device_rule.h"
#include "core/model.h"

namespace gdw {

struct WantedDevice {
  DeviceNumber dev;
  std::uint8_t access = kAccessReadWrite;
  // Path relative to the dev root ("nvidia0", "nvidia-uvm", "nvidia-caps/nvidia-cap13"):
  // what a person recognises, and the bounded `device` metric label.
  std::string name;
  // Why it is wanted: the device ID ("GPU-…", "MIG-… gi access"), "control", or
  // "DeviceSpec /dev/nvidia1".
  std::string reason;

  bool operator==(const WantedDevice&) const = default;
};

struct DesiredDevices {
  std::vector<WantedDevice> wanted;     // one per device number, sorted by number
  std::vector<std::string> unresolved;  // allocated IDs or paths that map to no device here
  // The CDI names (AllocResp cdi_devices, DRA claims) among them that no spec in
  // cdi.spec_dirs defines: gpu_devwatch_cdi_unresolved_devices.
  std::vector<std::string> unresolved_cdi;
  bool holds_gpu = false;               // has an allocation entry for a watched resource

  bool operator==(const DesiredDevices&) const = default;
};

// devices.env_visible: what to do with GPUs a container without any allocation reaches
// through NVIDIA_VISIBLE_DEVICES (core/env_visible.h). report: list them, grant nothing.
// restore: make them its desired set (trusts the runtime hook's own policy).
enum class EnvVisiblePolicy { kReport, kRestore };

struct DesiredPolicy {
  std::vector<std::string> resource_globs;  // "nvidia.com/gpu", "nvidia.com/mig-*"
  std::vector<std::string> control_names;   // "nvidiactl", "nvidia-uvm", ...
  EnvVisiblePolicy env_visible = EnvVisiblePolicy::kReport;
  std::vector<std::string> dra_driver_globs;  // "gpu.nvidia.com", ...: DRA claims that are GPUs
};

// Shell-style glob (fnmatch without flags) on a resource name.
bool resource_matches(const std::vector<std::string>& globs, const std::string& resource);

// Whether an allocation entry is a GPU allocation under the policy: a device plugin's entry
// of a watched resource, or a DRA claim's entry of a watched driver.
bool is_dra(const AllocationEntry& entry);
bool entry_watched(const DesiredPolicy& policy, const AllocationEntry& entry);

// Strips a time-slicing/MPS replica suffix: "GPU-…::3" → "GPU-…".
std::string strip_replica_suffix(const std::string& device_id);

// `entries` are the allocation entries of ONE container (all resources); entries for
// resources outside the policy are ignored.
// CDI names (a device plugin's AllocResp cdi_devices, a DRA claim's devices) resolve
// through inventory.cdi_devices to their device nodes (a node's own major/minor, else the
// host path's stat() under the dev root, char devices only); a name no spec defines is
// unresolved, never guessed. Control nodes (policy.control_names) go with device-plugin
// GPU entries only: a DRA driver's CDI spec lists the nodes its devices need (NVIDIA's
// puts nvidiactl and the UVM nodes in its spec-level edits), and an AMD or Intel claim
// must not gain NVIDIA's nodes.
DesiredDevices compute_desired(const std::vector<AllocationEntry>& entries, const Inventory& inventory,
                               const DesiredPolicy& policy);

// GPU and MIG device IDs ("GPU-…", "MIG-…") → their nodes, plus the control nodes when
// any ID is given: compute_desired() for IDs that come from elsewhere than an allocation
// entry (NVIDIA_VISIBLE_DEVICES, core/env_visible.h).
DesiredDevices desired_for_device_ids(const std::vector<std::string>& device_ids, const Inventory& inventory,
                                      const DesiredPolicy& policy);

// The devices of `desired` that `actual` does not allow.
std::vector<WantedDevice> missing_devices(const DesiredDevices& desired, const DeviceList& actual);

// The rules to write to devices.allow to grant `missing`: one `c M:m <access>` each,
// never `a`, never a wildcard.
std::vector<DeviceRule> grant_rules(const std::vector<WantedDevice>& missing);

}  // namespace gdw
