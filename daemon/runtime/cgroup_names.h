// Kubernetes cgroup naming (cgroupfs and systemd drivers): which directory is a QoS class,
// a pod, a container. Pure: names in, meaning out.
#pragma once

#include <optional>
#include <string>
#include <string_view>

#include "core/config.h"

namespace gdw {

enum class QosClass { kGuaranteed, kBurstable, kBestEffort };
enum class RuntimeKind { kUnknown, kContainerd, kCrio, kDocker };

std::string to_string(QosClass q);
std::string to_string(RuntimeKind r);

// "burstable" / "besteffort" (cgroupfs) or "kubepods-burstable.slice" / ... (systemd).
std::optional<QosClass> parse_qos_dir(std::string_view name);

struct PodDirName {
  std::string pod_uid;  // with dashes, as in the API
  CgroupDriver driver = CgroupDriver::kCgroupfs;
};
// "pod<uid>" (cgroupfs) or "kubepods[-<qos>]-pod<uid with _>.slice" (systemd).
std::optional<PodDirName> parse_pod_dir(std::string_view name);

struct ContainerLeafName {
  std::string container_id;
  RuntimeKind runtime = RuntimeKind::kUnknown;  // kUnknown: bare id (containerd or docker)
  CgroupDriver driver = CgroupDriver::kCgroupfs;
};
// "<id>", "crio-<id>", "cri-containerd-<id>.scope", "crio-<id>.scope", "docker-<id>.scope".
// CRI-O's conmon cgroups ("crio-conmon-<id>") are not containers.
std::optional<ContainerLeafName> parse_container_leaf(std::string_view name);

// crun with the systemd driver on cgroup v2 moves a container's processes into a sub-cgroup
// of its scope, `<scope>/container` (crun's run.oci.systemd.subgroup default), and attaches
// its device program there, not on the scope; with cgroupfs, and on cgroup v1, it makes
// none (observed with crun 1.8.1 and systemd 252). That sub-cgroup is part of the
// container whose leaf it is below: it never names a container or a pod of its own.
inline constexpr const char* kCrunSubgroup = "container";

// The pod UID in an OCI linux.cgroupsPath: "/kubepods/burstable/pod<uid>/<id>" or
// "kubepods-burstable-pod<uid_>.slice:cri-containerd:<id>".
std::optional<std::string> pod_uid_from_cgroups_path(std::string_view cgroups_path);

}  // namespace gdw
