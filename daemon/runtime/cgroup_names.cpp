#include "runtime/cgroup_names.h"

#include <algorithm>

namespace gdw {
namespace {

bool is_hex_id(std::string_view s) {
  // Container IDs are 64 hex characters for containerd, CRI-O and docker.
  return s.size() == 64 && std::all_of(s.begin(), s.end(), [](char c) {
           return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f');
         });
}

bool is_uid(std::string_view s) {
  // Pod UIDs are RFC 4122 UUIDs; static pods use a 32-hex hash. Accept hex and dashes.
  return s.size() >= 8 && s.size() <= 64 && std::all_of(s.begin(), s.end(), [](char c) {
           return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f') || c == '-';
         });
}

bool consume_prefix(std::string_view& s, std::string_view prefix) {
  if (s.rfind(prefix, 0) != 0) return false;
  s.remove_prefix(prefix.size());
  return true;
}

bool consume_suffix(std::string_view& s, std::string_view suffix) {
  if (s.size() < suffix.size() || s.substr(s.size() - suffix.size()) != suffix) return false;
  s.remove_suffix(suffix.size());
  return true;
}

}  // namespace

std::string to_string(QosClass q) {
  switch (q) {
    case QosClass::kGuaranteed: return "guaranteed";
    case QosClass::kBurstable: return "burstable";
    case QosClass::kBestEffort: return "besteffort";
  }
  return "unknown";
}

std::string to_string(RuntimeKind r) {
  switch (r) {
    case RuntimeKind::kContainerd: return "containerd";
    case RuntimeKind::kCrio: return "cri-o";
    case RuntimeKind::kDocker: return "docker";
    case RuntimeKind::kUnknown: break;
  }
  return "unknown";
}

std::optional<QosClass> parse_qos_dir(std::string_view name) {
  if (name == "burstable" || name == "kubepods-burstable.slice") return QosClass::kBurstable;
  if (name == "besteffort" || name == "kubepods-besteffort.slice") return QosClass::kBestEffort;
  return std::nullopt;
}

std::optional<PodDirName> parse_pod_dir(std::string_view name) {
  std::string_view s = name;
  if (consume_prefix(s, "pod")) {
    if (!is_uid(s)) return std::nullopt;
    return PodDirName{std::string(s), CgroupDriver::kCgroupfs};
  }
  if (!consume_suffix(s, ".slice")) return std::nullopt;
  auto pos = s.rfind("-pod");
  if (pos == std::string_view::npos || s.rfind("kubepods", 0) != 0) return std::nullopt;
  std::string uid(s.substr(pos + 4));
  // systemd escapes '-' inside a name part as '_'.
  std::replace(uid.begin(), uid.end(), '_', '-');
  if (!is_uid(uid)) return std::nullopt;
  return PodDirName{uid, CgroupDriver::kSystemd};
}

std::optional<ContainerLeafName> parse_container_leaf(std::string_view name) {
  std::string_view s = name;
  if (consume_suffix(s, ".scope")) {
    RuntimeKind runtime;
    if (consume_prefix(s, "cri-containerd-")) {
      runtime = RuntimeKind::kContainerd;
    } else if (consume_prefix(s, "crio-")) {
      runtime = RuntimeKind::kCrio;
    } else if (consume_prefix(s, "docker-")) {
      runtime = RuntimeKind::kDocker;
    } else {
      return std::nullopt;
    }
    if (!is_hex_id(s)) return std::nullopt;
    return ContainerLeafName{std::string(s), runtime, CgroupDriver::kSystemd};
  }
  if (consume_prefix(s, "crio-")) {
    if (!is_hex_id(s)) return std::nullopt;  // also rejects crio-conmon-<id>
    return ContainerLeafName{std::string(s), RuntimeKind::kCrio, CgroupDriver::kCgroupfs};
  }
  if (!is_hex_id(s)) return std::nullopt;
  return ContainerLeafName{std::string(s), RuntimeKind::kUnknown, CgroupDriver::kCgroupfs};
}

std::optional<std::string> pod_uid_from_cgroups_path(std::string_view cgroups_path) {
  // systemd form: "<slice>:<prefix>:<name>" — the pod is the slice.
  if (cgroups_path.find(':') != std::string_view::npos && cgroups_path.find('/') == std::string_view::npos) {
    auto slice = cgroups_path.substr(0, cgroups_path.find(':'));
    if (auto pod = parse_pod_dir(slice)) return pod->pod_uid;
    return std::nullopt;
  }
  std::size_t start = 0;
  while (start <= cgroups_path.size()) {
    auto end = cgroups_path.find('/', start);
    auto part = cgroups_path.substr(start, end == std::string_view::npos ? std::string_view::npos : end - start);
    if (auto pod = parse_pod_dir(part)) return pod->pod_uid;
    if (end == std::string_view::npos) break;
    start = end + 1;
  }
  return std::nullopt;
}

}  // namespace gdw
