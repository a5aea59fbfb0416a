#include "node/container_target.h"

namespace gdw {

AllocationIndex::AllocationIndex(const std::vector<AllocationEntry>& entries, const DesiredPolicy& policy) {
  for (const auto& e : entries) {
    if (!resource_matches(policy.resource_globs, e.resource)) continue;
    by_container_[{e.pod_uid, e.container_name}].push_back(e);
    if (!e.device_ids.empty() || !e.device_specs.empty()) pods_.insert(e.pod_uid);
  }
}

const std::vector<AllocationEntry>* AllocationIndex::find(const std::string& pod_uid,
                                                          const std::string& container) const {
  auto it = by_container_.find({pod_uid, container});
  return it == by_container_.end() ? nullptr : &it->second;
}

ContainerTarget resolve_container(const DiscoveredContainer& cgroup, const Bundle* bundle,
                                  const AllocationIndex& allocations, const Inventory& inventory,
                                  const DesiredPolicy& policy) {
  ContainerTarget t;
  t.cgroup = cgroup;
  t.bundle = bundle;
  if (!bundle) {
    t.kind = TargetKind::kUnidentified;
    t.problem = "no OCI bundle for container " + cgroup.leaf.container_id + " in runtime.state_dirs";
    return t;
  }
  const OciContainerInfo& info = bundle->info;
  if (info.type == ContainerType::kSandbox) {
    t.kind = TargetKind::kSandbox;
    return t;
  }
  // The cgroup path is what the kernel enforces on; the bundle's UID should agree with it.
  PodIdentity id{cgroup.pod.pod_uid, info.pod_namespace, info.pod_name, info.container_name};
  if (!info.pod_uid.empty() && info.pod_uid != cgroup.pod.pod_uid) {
    t.problem = "bundle says pod " + info.pod_uid + " but the cgroup is under pod " + cgroup.pod.pod_uid;
  }
  if (info.container_name.empty()) {
    t.kind = TargetKind::kUnidentified;
    t.problem = "OCI bundle " + bundle->config_path + " has no container-name annotation";
    return t;
  }
  t.identity = id;
  const auto* entries = allocations.find(id.pod_uid, id.container_name);
  if (entries) t.desired = compute_desired(*entries, inventory, policy);
  t.kind = t.desired.holds_gpu ? TargetKind::kGpu : TargetKind::kNotGpu;
  return t;
}

}  // namespace gdw
