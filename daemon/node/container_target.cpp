#include "node/container_target.h"

namespace gdw {

bool persist_in_scope(const ContainerTarget& target) {
  return target.cgroup.leaf.driver == CgroupDriver::kSystemd && target.scope_restricts_devices != false;
}

AllocationIndex::AllocationIndex(const std::vector<AllocationEntry>& entries, const DesiredPolicy& policy) {
  for (const auto& e : entries) {
    if (!entry_watched(policy, e)) continue;
    by_container_[{e.pod_uid, e.container_name}].push_back(e);
    if (!e.device_ids.empty() || !e.device_specs.empty() || !e.cdi_devices.empty()) pods_.insert(e.pod_uid);
  }
}

const std::vector<AllocationEntry>* AllocationIndex::find(const std::string& pod_uid,
                                                          const std::string& container) const {
  auto it = by_container_.find({pod_uid, container});
  return it == by_container_.end() ? nullptr : &it->second;
}

namespace {

// What in the bundle contradicts the cgroup, or "" when nothing does.
std::string contradiction(const DiscoveredContainer& cgroup, const Bundle& bundle) {
  const OciContainerInfo& info = bundle.info;
  const std::string& uid = cgroup.pod.pod_uid;
  if (!info.pod_uid.empty() && info.pod_uid != uid)
    return "bundle " + bundle.config_path + " says pod " + info.pod_uid + " but the cgroup is under pod " + uid;
  if (auto path_uid = pod_uid_from_cgroups_path(info.cgroups_path); path_uid && *path_uid != uid)
    return "bundle " + bundle.config_path + " has linux.cgroupsPath in pod " + *path_uid + " but the cgroup is under pod " + uid;
  if (cgroup.leaf.runtime != RuntimeKind::kUnknown && cgroup.leaf.runtime != info.runtime)
    return "bundle " + bundle.config_path + " was written by " + to_string(info.runtime) + " but the cgroup is " +
           to_string(cgroup.leaf.runtime) + "'s";
  if (!info.container_id.empty() && info.container_id != cgroup.leaf.container_id)
    return "bundle " + bundle.config_path + " names container " + info.container_id;
  return "";
}

}  // namespace

std::vector<std::string> pod_uids_of(const std::vector<std::string>& parent_dirs) {
  std::vector<std::string> uids;
  for (const auto& dir : parent_dirs) {
    if (auto pod = parse_pod_dir(std::string_view(dir).substr(dir.rfind('/') + 1))) uids.push_back(pod->pod_uid);
  }
  return uids;
}

Identification identify_container(const DiscoveredContainer& cgroup, const Bundle* bundle) {
  Identification out;
  if (!bundle) {
    out.problem = "no OCI bundle for container " + cgroup.leaf.container_id + " in runtime.state_dirs";
    return out;
  }
  const OciContainerInfo& info = bundle->info;
  if (info.runtime == RuntimeKind::kUnknown) {
    out.problem = "OCI bundle " + bundle->config_path + " names nobody: " + info.identity_problem;
    return out;
  }
  if (std::string why = contradiction(cgroup, *bundle); !why.empty()) {
    out.problem = why + "; not used";
    out.conflict = true;
    return out;
  }
  if (info.type == ContainerType::kSandbox) {
    out.kind = TargetKind::kSandbox;
    if (!info.pod_name.empty()) out.identity = PodIdentity{cgroup.pod.pod_uid, info.pod_namespace, info.pod_name, ""};
    return out;
  }
  if (info.type != ContainerType::kContainer || info.container_name.empty() || info.pod_name.empty()) {
    out.problem = "OCI bundle " + bundle->config_path + " has no container type, container name or pod name from " +
                  to_string(info.runtime) + (info.identity_problem.empty() ? "" : ": " + info.identity_problem);
    return out;
  }
  out.kind = TargetKind::kNotGpu;
  out.identity = PodIdentity{cgroup.pod.pod_uid, info.pod_namespace, info.pod_name, info.container_name};
  return out;
}

ContainerTarget resolve_container(const DiscoveredContainer& cgroup, const Bundle* bundle,
                                  const AllocationIndex& allocations, const Inventory& inventory,
                                  const DesiredPolicy& policy) {
  ContainerTarget t;
  t.cgroup = cgroup;
  t.bundle = bundle;
  Identification id = identify_container(cgroup, bundle);
  t.kind = id.kind;
  t.problem = std::move(id.problem);
  t.identity_conflict = id.conflict;
  if (!id.identity || id.kind == TargetKind::kSandbox) return t;
  t.identity = std::move(id.identity);
  const auto* entries = allocations.find(t.identity->pod_uid, t.identity->container_name);
  if (entries) t.desired = compute_desired(*entries, inventory, policy);
  // The allocation wins: a container's NVIDIA_VISIBLE_DEVICES counts only without one.
  if (!t.desired.holds_gpu && bundle->info.nvidia_visible_devices) {
    t.env_visible = env_visible_gpus(*bundle->info.nvidia_visible_devices, inventory, policy);
    if (t.env_visible && policy.env_visible == EnvVisiblePolicy::kRestore && t.env_visible->desired.holds_gpu) {
      t.env_visible->restored = true;
      t.desired = t.env_visible->desired;
    }
  }
  t.kind = t.desired.holds_gpu ? TargetKind::kGpu : TargetKind::kNotGpu;
  return t;
}

}  // namespace gdw
