// Finds Kubernetes container cgroups under the kubepods parent of one cgroup hierarchy
// (the v1 devices hierarchy, or the unified v2 one).
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "core/result.h"
#include "runtime/cgroup_names.h"

namespace gdw {

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

struct KubepodsTree {
  std::vector<std::string> parent_dirs;  // QoS and pod directories (absolute), to watch
  std::vector<DiscoveredContainer> containers;
};
KubepodsTree scan_kubepods(const KubepodsLocation& where);

}  // namespace gdw
