#include "runtime/discovery.h"

#include <sys/stat.h>

#include "runtime/kubepods_scan.h"

namespace gdw {
namespace {

bool is_dir(const std::string& path) {
  struct stat st{};
  return ::stat(path.c_str(), &st) == 0 && S_ISDIR(st.st_mode);
}

}  // namespace

Result<Hierarchy> locate_hierarchy(const std::string& cgroup_root, CgroupVersion configured) {
  auto exists = [](const std::string& p) {
    struct stat st{};
    return ::stat(p.c_str(), &st) == 0;
  };
  const std::string v1 = cgroup_root + "/devices";
  if (configured != CgroupVersion::kV2 && exists(v1 + "/devices.list")) return Hierarchy{CgroupVersion::kV1, v1};
  if (configured == CgroupVersion::kV1) return Error{"cgroup.version v1: no devices hierarchy at " + v1};
  for (const std::string& root : {cgroup_root, cgroup_root + "/unified"}) {
    if (exists(root + "/cgroup.controllers")) return Hierarchy{CgroupVersion::kV2, root};
  }
  if (configured == CgroupVersion::kV2) return Error{"cgroup.version v2: no cgroup2 mount at " + cgroup_root};
  // A tree of plain directories (fixtures) without devices.list: treat <root>/devices as v1.
  if (is_dir(v1)) return Hierarchy{CgroupVersion::kV1, v1};
  return Error{"no cgroup v1 devices hierarchy or cgroup2 mount under " + cgroup_root};
}

Result<KubepodsLocation> locate_kubepods(const std::string& hierarchy_root, const std::string& configured) {
  if (!is_dir(hierarchy_root)) return Error{"cgroup hierarchy " + hierarchy_root + " does not exist"};
  if (!configured.empty()) {
    KubepodsLocation loc{hierarchy_root, configured};
    if (!is_dir(loc.dir())) return Error{"cgroup.kubepods: " + loc.dir() + " does not exist"};
    return loc;
  }
  for (const char* name : {"kubepods", "kubepods.slice"}) {
    KubepodsLocation loc{hierarchy_root, name};
    if (is_dir(loc.dir())) return loc;
  }
  return Error{"no kubepods or kubepods.slice under " + hierarchy_root +
               " (is kubelet running? set cgroup.kubepods to its pod parent)"};
}

std::optional<CgroupDirKind> classify_cgroup_dir(const KubepodsLocation& where, const std::string& abs_dir) {
  const std::string base = where.dir() + "/";
  if (abs_dir.rfind(base, 0) != 0) return std::nullopt;
  std::vector<std::string> parts;
  std::string rest = abs_dir.substr(base.size());
  for (std::size_t start = 0; start <= rest.size();) {
    auto end = rest.find('/', start);
    parts.push_back(rest.substr(start, end == std::string::npos ? std::string::npos : end - start));
    if (end == std::string::npos) break;
    start = end + 1;
  }
  QosClass qos = QosClass::kGuaranteed;
  std::size_t i = 0;
  if (auto q = parse_qos_dir(parts[0])) {
    if (parts.size() == 1) return CgroupDirKind{CgroupDirKind::kQos, std::nullopt};
    qos = *q;
    i = 1;
  }
  auto pod = parse_pod_dir(parts[i]);
  if (!pod) return std::nullopt;
  std::string pod_dir = base + parts[0] + (i == 1 ? "/" + parts[1] : "");
  if (parts.size() == i + 1) return CgroupDirKind{CgroupDirKind::kPod, std::nullopt};
  if (parts.size() != i + 2) return std::nullopt;
  auto leaf = parse_container_leaf(parts[i + 1]);
  if (!leaf) return std::nullopt;
  return CgroupDirKind{CgroupDirKind::kContainer, DiscoveredContainer{abs_dir, pod_dir, qos, *pod, *leaf}};
}

bool inside_a_pod(const KubepodsLocation& where, const std::string& abs_dir) {
  const std::string base = where.dir() + "/";
  if (abs_dir.rfind(base, 0) != 0) return false;
  // Each ancestor below kubepods, nearest the root first: QoS, pod, then what is in the pod.
  for (auto slash = abs_dir.find('/', base.size()); slash != std::string::npos; slash = abs_dir.find('/', slash + 1)) {
    const auto kind = classify_cgroup_dir(where, abs_dir.substr(0, slash));
    if (kind && kind->level == CgroupDirKind::kPod) return true;
  }
  return false;
}

KubepodsTree scan_kubepods(const KubepodsLocation& where) { return KubepodsScanner(0).scan(where); }

}  // namespace gdw
