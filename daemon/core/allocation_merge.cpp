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
  // DRA claims' devices of watched drivers, keyed (pod UID, container, "dra <driver> <claim>"):
  // PodResources alone reports them, so they are never compared with the checkpoint.
  std::map<EntryKey, AllocationEntry> claims;
  std::set<std::pair<std::string, std::string>> listed_pods;  // (namespace, name)
  std::vector<std::string> unmapped;
  std::vector<std::string> unused_unnamed;  // not used while a pod on the node has no known name
};

PodResourcesSide pod_resources_entries(const std::vector<PodResourcesContainer>& containers,
                                       const AllocationSources& sources, const std::vector<std::string>& globs,
                                       const std::vector<std::string>& dra_globs,
                                       std::map<PodName, std::vector<std::string>>& unused_by_ambiguity) {
  PodResourcesSide side;
  for (const auto& c : containers) {
    const PodName name{c.pod_namespace, c.pod_name};
    side.listed_pods.insert(name);
    const LivePodIndex* live = sources.live;
    const bool unnamed_pods = live != nullptr && !live->unnamed_uids.empty();
    const bool ambiguous = unnamed_pods || (live != nullptr && live->ambiguous.count(name) > 0);
    const LivePod* pod = nullptr;
    if (live != nullptr && !ambiguous) {
      auto it = live->pods.find(name);
      if (it != live->pods.end()) pod = &it->second;
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
    for (const auto& claim : c.claims) {
      if (!resource_matches(dra_globs, claim.driver)) continue;
      std::vector<std::string> names;
      add_ids(names, claim.cdi_devices);  // CDI names have no "::"; deduplicated
      if (names.empty()) continue;
      if (pod == nullptr) {
        unmapped = true;
        continue;
      }
      const std::string claim_name = claim.claim_namespace + "/" + claim.claim_name;
      auto [it, inserted] =
          side.claims.try_emplace(EntryKey{pod->uid, c.container_name, "dra " + claim.driver + " " + claim_name});
      if (inserted) {
        it->second.pod_uid = pod->uid;
        it->second.container_name = c.container_name;
        it->second.resource = claim.driver;
        it->second.dra_claim = claim_name;
      }
      add_ids(it->second.cdi_devices, names);
    }
    if (!unmapped) continue;
    std::string where = c.pod_namespace + "/" + c.pod_name + "/" + c.container_name;
    if (unnamed_pods) {
      side.unused_unnamed.push_back(std::move(where));
    } else if (ambiguous) {
      unused_by_ambiguity[name].push_back(std::move(where));
    } else {
      side.unmapped.push_back(std::move(where));
    }
  }
  return side;
}

std::vector<MergedAllocations::Ambiguity> ambiguities(const AmbiguousPodNames& names,
                                                      std::map<PodName, std::vector<std::string>>& unused) {
  std::vector<MergedAllocations::Ambiguity> out;
  for (const auto& [name, uids] : names) {
    out.push_back({name, std::vector<std::string>(uids.begin(), uids.end()), std::move(unused[name])});
  }
  return out;
}

void report_identity_gaps(const LivePodIndex* live, std::map<PodName, std::vector<std::string>>& unused_by_ambiguity,
                          std::vector<std::string> unused_unnamed, MergedAllocations& merged) {
  if (live == nullptr) return;
  merged.ambiguous = ambiguities(live->ambiguous, unused_by_ambiguity);
  merged.unnamed_pods.assign(live->unnamed_uids.begin(), live->unnamed_uids.end());
  merged.unused_pod_resources_unnamed = std::move(unused_unnamed);
}

// In key order, whatever loop found them.
void sort_disagreements(std::vector<AllocationDisagreement>& disagreements) {
  std::sort(disagreements.begin(), disagreements.end(),
            [](const AllocationDisagreement& a, const AllocationDisagreement& b) {
              return std::tie(a.pod_uid, a.container_name, a.resource) <
                     std::tie(b.pod_uid, b.container_name, b.resource);
            });
}

std::vector<AllocationEntry> values(std::map<EntryKey, AllocationEntry>&& by_key) {
  std::vector<AllocationEntry> out;
  out.reserve(by_key.size());
  for (auto& [key, entry] : by_key) out.push_back(std::move(entry));
  return out;
}

// Both sources answered (mode auto): per (pod UID, container, resource), as the header says.
std::map<EntryKey, AllocationEntry> merge_both(std::map<EntryKey, AllocationEntry>& from_checkpoint,
                                               PodResourcesSide& from_pod_resources, const LivePodIndex* live,
                                               MergedAllocations& merged) {
  std::map<std::string, std::pair<std::pair<std::string, std::string>, const LivePod*>> pod_by_uid;
  if (live != nullptr) {
    for (const auto& [name, pod] : live->pods) pod_by_uid[pod.uid] = {name, &pod};
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
  return chosen;
}

}  // namespace

void LivePodIndex::mark_ambiguous(const PodName& name, const std::string& uid) {
  auto& uids = ambiguous[name];
  uids.insert(uid);
  if (auto it = pods.find(name); it != pods.end()) {
    uids.insert(it->second.uid);
    pods.erase(it);
  }
}

void LivePodIndex::add(const PodName& name, const std::string& uid, const std::string& container) {
  unnamed_uids.erase(uid);
  auto [seen, first] = name_of_uid_.try_emplace(uid, name);
  if (!first && seen->second != name) {
    mark_ambiguous(seen->second, uid);
    mark_ambiguous(name, uid);
    return;
  }
  if (auto it = ambiguous.find(name); it != ambiguous.end()) {
    it->second.insert(uid);
    return;
  }
  auto [it, inserted] = pods.try_emplace(name, LivePod{uid, {}});
  if (!inserted && it->second.uid != uid) {
    mark_ambiguous(name, uid);
    return;
  }
  if (!container.empty()) it->second.containers.insert(container);
}

void LivePodIndex::saw_pod(const std::string& uid) {
  if (!name_of_uid_.count(uid)) unnamed_uids.insert(uid);
}

std::string describe(const MergedAllocations::Ambiguity& a) {
  std::string text = "pod name " + a.name.first + "/" + a.name.second + " is ambiguous: live pod uids " + join(a.uids);
  if (!a.unused_pod_resources.empty())
    text += "; PodResources entries not used: " + join(a.unused_pod_resources);
  return text;
}

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
                                    const std::vector<std::string>& resource_globs,
                                    const std::vector<std::string>& dra_driver_globs) {
  MergedAllocations merged;
  const bool use_checkpoint = mode != AllocationSource::kPodResources && sources.checkpoint != nullptr;
  const bool use_pod_resources = mode != AllocationSource::kCheckpoint && sources.pod_resources != nullptr;

  std::map<EntryKey, AllocationEntry> from_checkpoint;
  if (use_checkpoint) from_checkpoint = checkpoint_entries(*sources.checkpoint, resource_globs);
  PodResourcesSide from_pod_resources;
  std::map<PodName, std::vector<std::string>> unused_by_ambiguity;
  if (use_pod_resources) {
    from_pod_resources =
        pod_resources_entries(*sources.pod_resources, sources, resource_globs, dra_driver_globs, unused_by_ambiguity);
    merged.unmapped_containers = std::move(from_pod_resources.unmapped);
  }
  report_identity_gaps(sources.live, unused_by_ambiguity, std::move(from_pod_resources.unused_unnamed), merged);

  if (!use_pod_resources) {
    merged.entries = values(std::move(from_checkpoint));
    return merged;
  }
  if (!use_checkpoint) {
    from_pod_resources.entries.merge(from_pod_resources.claims);
    merged.entries = values(std::move(from_pod_resources.entries));
    return merged;
  }

  std::map<EntryKey, AllocationEntry> chosen = merge_both(from_checkpoint, from_pod_resources, sources.live, merged);
  sort_disagreements(merged.disagreements);
  chosen.merge(from_pod_resources.claims);
  merged.entries = values(std::move(chosen));
  return merged;
}

}  // namespace gdw
