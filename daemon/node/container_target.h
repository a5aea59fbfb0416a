// Who a container cgroup is and which devices it must have. Pure: the bundle, allocation
// records and inventory are inputs.
#pragma once

#include <map>
#include <optional>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "core/desired_state.h"
#include "core/model.h"
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
  kUnidentified,  // no OCI bundle found; reported when its pod holds devices
};

struct ContainerTarget {
  DiscoveredContainer cgroup;
  TargetKind kind = TargetKind::kUnidentified;
  std::optional<PodIdentity> identity;
  const Bundle* bundle = nullptr;  // owned by the BundleIndex; valid until its next refresh
  DesiredDevices desired;
  std::string problem;  // why unidentified, or an identity mismatch worth reporting
};

ContainerTarget resolve_container(const DiscoveredContainer& cgroup, const Bundle* bundle,
                                  const AllocationIndex& allocations, const Inventory& inventory,
                                  const DesiredPolicy& policy);

}  // namespace gdw
