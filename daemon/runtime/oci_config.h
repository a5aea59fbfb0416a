// What gpu-devwatch needs from a container's OCI runtime spec (config.json): who the
// container is (CRI annotations), its cgroup, and its device rules.
#pragma once

#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "core/device_rule.h"
#include "core/result.h"

namespace gdw {

enum class ContainerType { kUnknown, kContainer, kSandbox };

// One linux.resources.devices entry: missing type/major/minor are wildcards.
struct OciDeviceCgroupRule {
  bool allow = false;
  DeviceRule rule;  // type kAll for "a" or a missing type
  bool operator==(const OciDeviceCgroupRule&) const = default;
};

// One linux.devices entry: a node the runtime creates inside the container.
struct OciLinuxDevice {
  std::string path;
  char type = 'c';
  std::uint32_t major = 0;
  std::uint32_t minor = 0;
};

struct OciContainerInfo {
  ContainerType type = ContainerType::kUnknown;
  std::string pod_uid;  // may be empty (containerd < 1.6.11 sets no sandbox-uid)
  std::string pod_namespace;
  std::string pod_name;
  std::string container_name;
  std::string sandbox_id;
  std::string cgroups_path;  // linux.cgroupsPath
  std::vector<OciDeviceCgroupRule> device_rules;
  std::vector<OciLinuxDevice> devices;
};

// Errors for malformed JSON or wrong types; missing optional parts are fine.
Result<OciContainerInfo> parse_oci_config(std::string_view json_text);

}  // namespace gdw
