// Who a container cgroup is and which devices it must have. Pure: the bundle, allocation
// records and inventory are inputs.
#pragma once

#include <map>
#include <optional>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "core/allocation_merge.h"
#include "core/desired_state.h"
#include "core/env_visible.h"
#include "core/model.h"
#include "node/exposure.h"
#include "runtime/bundles.h"
#include "runtime/discovery.h"

namespace gdw {

struct PodIdentity {
  std::string pod_uid;
  std::string pod_namespace;
  std::string pod_name;
  std::string container_name;
};

// Allocation entries by (pod UID, container name), for entries of watched resources.
class AllocationIndex {
 public:
  AllocationIndex() = default;
  AllocationIndex(const std::vector<AllocationEntry>& entries, const DesiredPolicy& policy);
  const std::vector<AllocationEntry>* find(const std::string& pod_uid, const std::string& container) const;
  bool pod_has_devices(const std::string& pod_uid) const { return pods_.count(pod_uid) > 0; }
  std::size_t size() const { return by_container_.size(); }

 private:
  std::map<std::pair<std::string, std::string>, std::vector<AllocationEntry>> by_container_;
  std::set<std::string> pods_;
};

enum class TargetKind {
  kGpu,           // has an allocation for a watched resource: watched and repaired
  kNotGpu,        // identified, no allocation: never touched
  kSandbox,       // pause container
  kUnidentified,  // no usable OCI bundle (none, names nobody, contradicts the cgroup);
                  // reported when its pod holds devices
};

struct ContainerTarget {
  DiscoveredContainer cgroup;
  TargetKind kind = TargetKind::kUnidentified;
  std::optional<PodIdentity> identity;
  const Bundle* bundle = nullptr;  // owned by the BundleIndex; valid until its next refresh
  DesiredDevices desired;
  std::string problem;  // why unidentified, or an identity mismatch worth reporting
  bool identity_conflict = false;  // the bundle contradicts the cgroup: not used (Identification)
  // No allocation of a watched resource, but NVIDIA_VISIBLE_DEVICES names GPUs: reported;
  // with devices.env_visible: restore they are `desired` too (kind kGpu).
  std::optional<EnvVisibleGpus> env_visible;
  // kGpu: wanted nodes the next re-apply would revoke (set by NodeModel::resolve).
  Exposure exposure;
  // kGpu, systemd driver: whether the scope's own device policy restricts anything
  // (DevicePolicy= other than auto, or a DeviceAllow= entry); nullopt when its unit files
  // could not be read (systemd.unit_dirs). Adding DeviceAllow= to a scope that restricts
  // nothing (crun's) would make systemd start enforcing: it must not be persisted there.
  std::optional<bool> scope_restricts_devices;
};

// Whether a repair's grant is worth adding to the scope's DeviceAllow=: systemd driver, and
// the scope is not known to restrict nothing.
bool persist_in_scope(const ContainerTarget& target);

// Who the container in `cgroup` is. The pod UID is always the cgroup path's (the kernel
// enforces it); the bundle gives the names, from its runtime's own keys only
// (runtime/oci_config.h). The bundle is not used, and the container is unidentified, when
// it names nobody (runtime unknown, no container name) or contradicts the cgroup: another
// pod UID (stated or in linux.cgroupsPath), another runtime than the cgroup leaf's, another
// container ID than its directory's.
struct Identification {
  TargetKind kind = TargetKind::kUnidentified;  // kNotGpu here means "identified container"
  std::optional<PodIdentity> identity;          // a sandbox's has no container name
  std::string problem;    // why unidentified
  bool conflict = false;  // the bundle contradicts the cgroup (a lie, or a runtime bug)
};
Identification identify_container(const DiscoveredContainer& cgroup, const Bundle* bundle);

ContainerTarget resolve_container(const DiscoveredContainer& cgroup, const Bundle* bundle,
                                  const AllocationIndex& allocations, const Inventory& inventory,
                                  const DesiredPolicy& policy);

// The live pods for merge_allocations(): every running container or sandbox cgroup that
// identify_container() identifies, by (namespace, name) from its bundle and UID from its
// cgroup; and as unnamed, every pod cgroup (`pod_uids`, from the tree's pod directories)
// none of whose containers is identified. `bundle_of` finds a container ID's bundle
// (nullptr: none).
template <class BundleOf>
LivePodIndex collect_live_pods(const std::vector<DiscoveredContainer>& containers,
                               const std::vector<std::string>& pod_uids, BundleOf&& bundle_of) {
  LivePodIndex index;
  for (const auto& cg : containers) {
    Identification id = identify_container(cg, bundle_of(cg.leaf.container_id));
    index.saw_pod(cg.pod.pod_uid);
    if (!id.identity) continue;
    index.add({id.identity->pod_namespace, id.identity->pod_name}, id.identity->pod_uid, id.identity->container_name);
  }
  for (const auto& uid : pod_uids) index.saw_pod(uid);
  return index;
}

// The pod UIDs of a kubepods tree's pod directories (QoS directories are skipped).
std::vector<std::string> pod_uids_of(const std::vector<std::string>& parent_dirs);

}  // namespace gdw
