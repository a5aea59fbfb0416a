// Finds Kubernetes container cgroups under the kubepods parent of one cgroup hierarchy
// (the v1 devices hierarchy, or the unified v2 one).
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "core/result.h"
#include "runtime/cgroup_names.h"

namespace gdw {

struct Hierarchy {
  CgroupVersion version = CgroupVersion::kV1;  // resolved: never kAuto
  std::string root;                           // /sys/fs/cgroup/devices, /sys/fs/cgroup, /sys/fs/cgroup/unified
};

// Which hierarchy holds the containers' device policy under cgroup.root:
// v1 — <root>/devices (a devices controller hierarchy: devices.list at its root);
// v2 — <root> when it is a cgroup2 mount (cgroup.controllers), else <root>/unified (the
// cgroup2 mount of a hybrid host). auto prefers v1 when the devices controller is there,
// because kubelet on a hybrid host puts pods in the v1 hierarchies.
Result<Hierarchy> locate_hierarchy(const std::string& cgroup_root, CgroupVersion configured);

struct KubepodsLocation {
  std::string hierarchy_root;  // /sys/fs/cgroup/devices
  std::string kubepods_rel;    // kubepods, kubepods.slice, or a configured path
  std::string dir() const { return hierarchy_root + "/" + kubepods_rel; }
};

// `configured` empty: detect kubepods or kubepods.slice.
Result<KubepodsLocation> locate_kubepods(const std::string& hierarchy_root, const std::string& configured);

struct DiscoveredContainer {
  std::string cgroup_dir;  // absolute
  std::string pod_dir;     // absolute
  QosClass qos = QosClass::kGuaranteed;
  PodDirName pod;
  ContainerLeafName leaf;
};

// What a directory under kubepods is, from its path alone.
struct CgroupDirKind {
  enum Level { kQos, kPod, kContainer } level;
  std::optional<DiscoveredContainer> container;  // for kContainer
};
std::optional<CgroupDirKind> classify_cgroup_dir(const KubepodsLocation& where, const std::string& abs_dir);
// Whether `abs_dir` is strictly below a pod's directory: a container's cgroup or one below
// it, where a tenant's processes are (a pod's own directory holds none of them).
bool inside_a_pod(const KubepodsLocation& where, const std::string& abs_dir);

struct KubepodsTree {
  std::vector<std::string> parent_dirs;  // QoS and pod directories (absolute), to watch
  std::vector<DiscoveredContainer> containers;
};
// One walk, nothing kept open (a long-lived reader uses KubepodsScanner, kubepods_scan.h).
KubepodsTree scan_kubepods(const KubepodsLocation& where);

}  // namespace gdw
