#include "core/allocation_merge.h"

#include <algorithm>
#include <set>
#include <tuple>

#include "core/desired_state.h"

namespace gdw {
namespace {

// (pod UID, container name, resource)
using EntryKey = std::tuple<std::string, std::string, std::string>;

void add_ids(std::vector<std::string>& into, const std::vector<std::string>& ids) {
  for (const auto& id : ids) {
    std::string device = strip_replica_suffix(id);
    if (device.empty()) continue;
    if (std::find(into.begin(), into.end(), device) == into.end()) into.push_back(std::move(device));
  }
}

bool same_devices(const std::vector<std::string>& a, const std::vector<std::string>& b) {
  return std::set<std::string>(a.begin(), a.end()) == std::set<std::string>(b.begin(), b.end());
}

std::string join(const std::vector<std::string>& ids) {
  std::string out = "[";
  for (std::size_t i = 0; i < ids.size(); ++i) out += (i ? "," : "") + ids[i];
  return out + "]";
}

std::map<EntryKey, AllocationEntry> checkpoint_entries(const std::vector<AllocationEntry>& entries,
                                                       const std::vector<std::string>& globs) {
  std::map<EntryKey, AllocationEntry> out;
  for (const auto& e : entries) {
    if (!resource_matches(globs, e.resource)) continue;
    auto [it, inserted] = out.try_emplace(EntryKey{e.pod_uid, e.container_name, e.resource}, e);
    if (inserted) it->second.device_ids.clear();
    add_ids(it->second.device_ids, e.device_ids);
  }
  return out;
}

struct PodResourcesSide {
  std::map<EntryKey, AllocationEntry> entries;
  std::set<std::pair<std::string, std::string>> listed_pods;  // (namespace, name)
  std::vector<std::string> unmapped;
};

PodResourcesSide pod_resources_entries(const std::vector<PodResourcesContainer>& containers,
                                       const LivePods* live_pods, const std::vector<std::string>& globs) {
  PodResourcesSide side;
  for (const auto& c : containers) {
    side.listed_pods.emplace(c.pod_namespace, c.pod_name);
    const LivePod* pod = nullptr;
    if (live_pods != nullptr) {
      auto it = live_pods->find({c.pod_namespace, c.pod_name});
      if (it != live_pods->end()) pod = &it->second;
    }
    bool unmapped = false;
    for (const auto& [resource, ids] : c.devices) {
      if (!resource_matches(globs, resource)) continue;
      std::vector<std::string> devices;
      add_ids(devices, ids);
      if (devices.empty()) continue;
      if (pod == nullptr) {
        unmapped = true;
        continue;
      }
      auto [it, inserted] = side.entries.try_emplace(EntryKey{pod->uid, c.container_name, resource});
      if (inserted) {
        it->second.pod_uid = pod->uid;
        it->second.container_name = c.container_name;
        it->second.resource = resource;
      }
      add_ids(it->second.device_ids, devices);
    }
    if (unmapped) side.unmapped.push_back(c.pod_namespace + "/" + c.pod_name + "/" + c.container_name);
  }
  return side;
}

std::vector<AllocationEntry> values(std::map<EntryKey, AllocationEntry>&& by_key) {
  std::vector<AllocationEntry> out;
  out.reserve(by_key.size());
  for (auto& [key, entry] : by_key) out.push_back(std::move(entry));
  return out;
}

}  // namespace

std::string to_string(DisagreementKind kind) {
  switch (kind) {
    case DisagreementKind::kOnlyInCheckpoint: return "only-in-checkpoint";
    case DisagreementKind::kOnlyInPodResources: return "only-in-pod-resources";
    case DisagreementKind::kDifferentDevices: return "different-devices";
  }
  return "unknown";
}

std::string describe(const AllocationDisagreement& d) {
  return to_string(d.kind) + ": pod " + d.pod_namespace + "/" + d.pod_name + " (uid " + d.pod_uid + ") container " +
         d.container_name + " resource " + d.resource + ": checkpoint " + join(d.checkpoint_ids) +
         ", PodResources " + join(d.pod_resources_ids);
}

MergedAllocations merge_allocations(const AllocationSources& sources, AllocationSource mode,
                                    const std::vector<std::string>& resource_globs) {
  MergedAllocations merged;
  const bool use_checkpoint = mode != AllocationSource::kPodResources && sources.checkpoint != nullptr;
  const bool use_pod_resources = mode != AllocationSource::kCheckpoint && sources.pod_resources != nullptr;

  std::map<EntryKey, AllocationEntry> from_checkpoint;
  if (use_checkpoint) from_checkpoint = checkpoint_entries(*sources.checkpoint, resource_globs);
  PodResourcesSide from_pod_resources;
  if (use_pod_resources) {
    from_pod_resources = pod_resources_entries(*sources.pod_resources, sources.live_pods, resource_globs);
    merged.unmapped_containers = std::move(from_pod_resources.unmapped);
  }

  if (!use_pod_resources) {
    merged.entries = values(std::move(from_checkpoint));
    return merged;
  }
  if (!use_checkpoint) {
    merged.entries = values(std::move(from_pod_resources.entries));
    return merged;
  }

  // Both sources answered: mode auto.
  std::map<std::string, std::pair<std::pair<std::string, std::string>, const LivePod*>> pod_by_uid;
  if (sources.live_pods != nullptr) {
    for (const auto& [name, pod] : *sources.live_pods) pod_by_uid[pod.uid] = {name, &pod};
  }
  auto disagreement = [&](DisagreementKind kind, const EntryKey& key, const AllocationEntry* checkpoint,
                          const AllocationEntry* pod_resources) {
    AllocationDisagreement d;
    d.kind = kind;
    std::tie(d.pod_uid, d.container_name, d.resource) = key;
    if (auto it = pod_by_uid.find(d.pod_uid); it != pod_by_uid.end()) {
      std::tie(d.pod_namespace, d.pod_name) = it->second.first;
    }
    if (checkpoint != nullptr) d.checkpoint_ids = checkpoint->device_ids;
    if (pod_resources != nullptr) d.pod_resources_ids = pod_resources->device_ids;
    merged.disagreements.push_back(std::move(d));
  };

  std::map<EntryKey, AllocationEntry> chosen;
  for (auto& [key, entry] : from_checkpoint) {
    auto live = from_pod_resources.entries.find(key);
    if (live == from_pod_resources.entries.end()) {
      auto pod = pod_by_uid.find(std::get<0>(key));
      const bool container_runs =
          pod != pod_by_uid.end() && pod->second.second->containers.count(std::get<1>(key)) > 0;
      if (container_runs && from_pod_resources.listed_pods.count(pod->second.first) > 0) {
        disagreement(DisagreementKind::kOnlyInCheckpoint, key, &entry, nullptr);
      }
      chosen.emplace(key, std::move(entry));
    } else if (same_devices(entry.device_ids, live->second.device_ids)) {
      chosen.emplace(key, std::move(entry));
    } else {
      disagreement(DisagreementKind::kDifferentDevices, key, &entry, &live->second);
      chosen.emplace(key, live->second);  // device IDs only: the AllocResp went with the checkpoint's devices
    }
  }
  for (auto& [key, entry] : from_pod_resources.entries) {
    if (from_checkpoint.count(key) > 0) continue;
    disagreement(DisagreementKind::kOnlyInPodResources, key, nullptr, &entry);
    chosen.emplace(key, std::move(entry));
  }
  // Disagreements in key order, whatever loop found them.
  std::sort(merged.disagreements.begin(), merged.disagreements.end(),
            [](const AllocationDisagreement& a, const AllocationDisagreement& b) {
              return std::tie(a.pod_uid, a.container_name, a.resource) <
                     std::tie(b.pod_uid, b.container_name, b.resource);
            });
  merged.entries = values(std::move(chosen));
  return merged;
}

}  // namespace gdw
