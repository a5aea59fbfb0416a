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
// A PodResources entry gets its pod UID from the live pods by (namespace, name); a name that
// maps to more than one live UID is ambiguous and its PodResources entries are not used for
// any of them (reported in `ambiguous`); while a pod on the node has no known name, none is
// used (`unnamed_pods`). Checkpoint entries, keyed by UID, still apply.
// In every mode only watched resources (resource globs) are considered, device IDs lose
// their replica suffix (`::n`) and are deduplicated, and devices are compared as sets.
// DRA: PodResources' dynamic_resources of drivers matching `dra_driver_globs` become one
// entry per (pod UID, container, driver, claim) with dra_claim set, resource = the driver
// and cdi_devices = the claim's CDI names; the same identity rules apply (ambiguous and
// unnamed pods). The device checkpoint has no DRA record, so nothing is compared: they
// are used whenever PodResources is (modes auto and pod-resources). kubelet's own DRA
// checkpoint (dra_manager_state) names pod UIDs but no container, so it cannot stand in.
#pragma once

#include <map>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "core/config.h"
#include "core/model.h"

namespace gdw {

// One device of a DRA claim as PodResources lists it (ClaimResource).
struct DraClaimDevice {
  std::string claim_namespace;
  std::string claim_name;
  std::string driver;  // driver_name: matched against devices.dra_drivers
  std::string pool;
  std::string device;
  std::vector<std::string> cdi_devices;  // fully qualified CDI names
  bool operator==(const DraClaimDevice&) const = default;
};

// One container as the PodResources API lists it.
struct PodResourcesContainer {
  std::string pod_namespace;
  std::string pod_name;
  std::string container_name;
  // Resource name → device IDs as kubelet reported them (replica suffixes kept).
  std::map<std::string, std::vector<std::string>> devices;
  // dynamic_resources, one element per ClaimResource.
  std::vector<DraClaimDevice> claims;
  bool operator==(const PodResourcesContainer&) const = default;
};

// A pod whose containers run on the node now: the name from the runtime's own keys in the
// OCI bundle, the UID from the container's cgroup path (kernel enforced).
struct LivePod {
  std::string uid;
  std::set<std::string> containers;  // container names running now
};
using PodName = std::pair<std::string, std::string>;  // (namespace, pod name)
// (namespace, pod name) → the live pod, for names with exactly one live UID.
using LivePods = std::map<PodName, LivePod>;
// Names with more than one live UID (a pod recreated while the old one's containers still
// run) → those UIDs. Entries keyed by name (PodResources) cannot say which pod they mean.
using AmbiguousPodNames = std::map<PodName, std::set<std::string>>;

// Collects the running containers into live pods. A name seen with a second UID, and every
// name of a UID seen under two names (one of its bundles cannot be right), moves from
// `pods` to `ambiguous` for good.
// A pod cgroup none of whose containers could be identified (no sandbox or container
// bundle names it yet, e.g. kubelet created it and the sandbox does not exist yet) is
// "unnamed": it could be any name, so while one exists no PodResources entry is mapped.
struct LivePodIndex {
  LivePods pods;
  AmbiguousPodNames ambiguous;
  std::set<std::string> unnamed_uids;
  // `container` empty: the pod's sandbox (names the pod, runs no workload).
  void add(const PodName& name, const std::string& uid, const std::string& container);
  // A pod cgroup seen on the node; unnamed unless add() named its UID.
  void saw_pod(const std::string& uid);

 private:
  void mark_ambiguous(const PodName& name, const std::string& uid);
  std::map<std::string, PodName> name_of_uid_;
};

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
  // Every ambiguous live pod name, with the PodResources containers holding watched devices
  // that were not used because of it ("namespace/pod/container").
  struct Ambiguity {
    PodName name;
    std::vector<std::string> uids;
    std::vector<std::string> unused_pod_resources;
    bool operator==(const Ambiguity&) const = default;
  };
  std::vector<Ambiguity> ambiguous;
  // Pod UIDs on the node whose name is unknown (LivePodIndex): while there are any, no
  // PodResources entry is used; `unused_pod_resources_unnamed` lists what was not used.
  std::vector<std::string> unnamed_pods;
  std::vector<std::string> unused_pod_resources_unnamed;
};
// One line for logs: the name, its UIDs, what was not used.
std::string describe(const MergedAllocations::Ambiguity& a);

struct AllocationSources {
  const std::vector<AllocationEntry>* checkpoint = nullptr;            // nullptr: no checkpoint read
  const std::vector<PodResourcesContainer>* pod_resources = nullptr;  // nullptr: no answer
  const LivePodIndex* live = nullptr;                                  // nullptr: none known
};

MergedAllocations merge_allocations(const AllocationSources& sources, AllocationSource mode,
                                    const std::vector<std::string>& resource_globs,
                                    const std::vector<std::string>& dra_driver_globs = {});

}  // namespace gdw
