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
  bool holds_gpu = false;               // has an allocation entry for a watched resource
};

struct DesiredPolicy {
  std::vector<std::string> resource_globs;  // "nvidia.com/gpu", "nvidia.com/mig-*"
  std::vector<std::string> control_names;   // "nvidiactl", "nvidia-uvm", ...
};

// Shell-style glob (fnmatch without flags) on a resource name.
bool resource_matches(const std::vector<std::string>& globs, const std::string& resource);

// Strips a time-slicing/MPS replica suffix: "GPU-…::3" → "GPU-…".
std::string strip_replica_suffix(const std::string& device_id);

// `entries` are the allocation entries of ONE container (all resources); entries for
// resources outside the policy are ignored.
DesiredDevices compute_desired(const std::vector<AllocationEntry>& entries, const Inventory& inventory,
                               const DesiredPolicy& policy);

// The devices of `desired` that `actual` does not allow.
std::vector<WantedDevice> missing_devices(const DesiredDevices& desired, const DeviceList& actual);

// The rules to write to devices.allow to grant `missing`: one `c M:m <access>` each,
// never `a`, never a wildcard.
std::vector<DeviceRule> grant_rules(const std::vector<WantedDevice>& missing);

}  // namespace gdw
