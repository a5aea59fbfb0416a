// What gpu-devwatch needs from a container's OCI runtime spec (config.json): who the
// container is (the runtime's own annotations), its cgroup, and its device rules.
//
// Identity is read only from keys the runtime itself writes, never from one a pod can set.
// Both runtimes copy pod annotations into config.json (CRI-O all of them; containerd those
// its pod_annotations list passes through), so the keys of the *other* runtime, and plain
// io.kubernetes.pod.* annotations, are tenant input. The rule:
//   1. Which runtime wrote the bundle is decided by where it lies (the caller's `layout`):
//      containerd   <state dir>/<id>/config.json           (its task directory)
//      CRI-O        <state dir>/<id>/userdata/config.json  (overlay-containers)
//      The runtime's own marker must then be present: io.kubernetes.cri.container-type
//      (containerd) or io.kubernetes.cri-o.ContainerType (CRI-O); else the runtime is
//      unknown and the bundle names nobody.
//      Without a layout (kUnknown), the markers decide, and only when exactly one
//      runtime's keys (io.kubernetes.cri.* / io.kubernetes.cri-o.*) are present at all.
//   2. containerd: io.kubernetes.cri.{container-type,container-name,sandbox-name,
//      sandbox-namespace,sandbox-uid,sandbox-id}. containerd writes them after the
//      pass-through, so a pod's own copies are overwritten.
//   3. CRI-O: io.kubernetes.cri-o.{ContainerType,ContainerID,SandboxID} and kubelet's labels
//      in io.kubernetes.cri-o.Labels (a JSON object: io.kubernetes.pod.name, .namespace,
//      .uid, io.kubernetes.container.name). Nothing else: not io.kubernetes.cri.*, not
//      io.kubernetes.pod.* annotations.
//   4. The pod UID the bundle states is only a cross-check: the kernel-enforced cgroup path
//      decides (node/container_target.h rejects a bundle that disagrees with it).
#pragma once

#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "core/device_rule.h"
#include "core/result.h"
#include "runtime/cgroup_names.h"

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
  // The runtime that wrote the bundle (rule 1); kUnknown: no identity fields are set and
  // identity_problem says why.
  RuntimeKind runtime = RuntimeKind::kUnknown;
  std::string identity_problem;
  ContainerType type = ContainerType::kUnknown;
  // The UID the runtime's keys state, else the one in linux.cgroupsPath; may be empty
  // (containerd < 1.6.11 sets no sandbox-uid). Cross-checked against the cgroup, never trusted alone.
  std::string pod_uid;
  std::string pod_namespace;
  std::string pod_name;
  std::string container_name;
  std::string sandbox_id;
  std::string container_id;  // CRI-O's io.kubernetes.cri-o.ContainerID (containerd states none)
  std::string cgroups_path;  // linux.cgroupsPath
  std::vector<OciDeviceCgroupRule> device_rules;
  std::vector<OciLinuxDevice> devices;
  // process.env's NVIDIA_VISIBLE_DEVICES (the last one, as the NVIDIA hook reads it);
  // nullopt when unset. Tenant input (the image or pod sets it): bounded by kMaxEnvScan
  // entries looked at and kMaxEnvValue bytes kept; never identity.
  std::optional<std::string> nvidia_visible_devices;
  std::string env_problem;  // why process.env was not (fully) read
};

inline constexpr std::size_t kMaxEnvScan = 4096;
inline constexpr std::size_t kMaxEnvValue = 8192;

// Errors for malformed JSON, wrong types and device numbers that are not 32-bit (a negative
// one is runc's wildcard); missing optional parts are fine. `layout`: which runtime's
// directory layout the file was found in (rule 1), kUnknown when not known.
Result<OciContainerInfo> parse_oci_config(std::string_view json_text, RuntimeKind layout = RuntimeKind::kUnknown);

}  // namespace gdw
