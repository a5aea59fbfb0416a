// Which allocation records to use when kubelet tells the same thing twice: its device-manager
// checkpoint (pod UID, AllocResp with DeviceSpecs, but a file that can be stale) and the
// PodResources API (kubelet's live view, but no pod UID and no device paths). Pure.
//
// The rule (kubelet.source):
//   checkpoint     the checkpoint's entries, nothing compared.
//   pod-resources  PodResources only: entries carry device IDs and no AllocResp data
//                  (no DeviceSpecs, envs); a container gets its pod UID from the live pods.
//   auto           a union per (pod UID, container, resource):
//                  - both list it with the same devices: the checkpoint entry (it alone
//                    carries the AllocResp);
//                  - both list it with different devices: PodResources wins (kubelet's live
//                    view); the checkpoint's AllocResp data is dropped, since it describes
//                    the devices kubelet no longer reports; reported;
//                  - only PodResources lists it: taken from PodResources; reported;
//                  - only the checkpoint lists it: kept; reported only when the container
//                    runs now and PodResources lists its pod (checkpoint entries of
//                    finished init containers, of pods kubelet has not garbage-collected
//                    yet, and of pods newer than the PodResources answer are normal).
//                  A source that gave no answer (nullptr) is not compared: the other is used
//                  alone.
// In every mode only watched resources (resource globs) are considered, device IDs lose
// their replica suffix (`::n`) and are deduplicated, and devices are compared as sets.
#pragma once

#include <map>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "core/config.h"
#include "core/model.h"

namespace gdw {

// One container as the PodResources API lists it.
struct PodResourcesContainer {
  std::string pod_namespace;
  std::string pod_name;
  std::string container_name;
  // Resource name → device IDs as kubelet reported them (replica suffixes kept).
  std::map<std::string, std::vector<std::string>> devices;
  bool operator==(const PodResourcesContainer&) const = default;
};

// A pod whose containers exist on the node now, from the runtime's OCI bundles.
struct LivePod {
  std::string uid;
  std::set<std::string> containers;  // container names with a bundle now
};
// (namespace, pod name) → the live pod.
using LivePods = std::map<std::pair<std::string, std::string>, LivePod>;

enum class DisagreementKind {
  kOnlyInCheckpoint,    // a running container the checkpoint gives devices and PodResources does not
  kOnlyInPodResources,  // PodResources gives devices the checkpoint does not record
  kDifferentDevices,    // both list the container's resource, with different devices
};
std::string to_string(DisagreementKind kind);

struct AllocationDisagreement {
  DisagreementKind kind = DisagreementKind::kDifferentDevices;
  std::string pod_uid;
  std::string pod_namespace;
  std::string pod_name;
  std::string container_name;
  std::string resource;
  std::vector<std::string> checkpoint_ids;     // replica suffixes stripped, deduplicated
  std::vector<std::string> pod_resources_ids;  // likewise
  bool operator==(const AllocationDisagreement&) const = default;
};
// One line for logs: what differs, for which container, both device lists.
std::string describe(const AllocationDisagreement& d);

struct MergedAllocations {
  // Sorted by (pod UID, container, resource).
  std::vector<AllocationEntry> entries;
  std::vector<AllocationDisagreement> disagreements;
  // PodResources containers holding watched devices whose pod has no live bundle yet (a pod
  // still starting): no pod UID, so no entry. "namespace/pod/container".
  std::vector<std::string> unmapped_containers;
};

struct AllocationSources {
  const std::vector<AllocationEntry>* checkpoint = nullptr;            // nullptr: no checkpoint read
  const std::vector<PodResourcesContainer>* pod_resources = nullptr;  // nullptr: no answer
  const LivePods* live_pods = nullptr;                                 // nullptr: none known
};

MergedAllocations merge_allocations(const AllocationSources& sources, AllocationSource mode,
                                    const std::vector<std::string>& resource_globs);

}  // namespace gdw
