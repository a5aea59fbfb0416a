// kubelet's PodResources List answer from arbitrary bytes: the generated message's parse,
// the client's conversion (pod_resources_containers) and merge_allocations() in every mode,
// against live pods and a checkpoint made from the same answer (some names held by two
// live UIDs). No crash, and the merge's promises hold: every entry belongs to a UID that
// the checkpoint names or that is the only live UID of its pod name; nothing a
// PodResources entry lists reaches a UID whose name is ambiguous.
#include <cstdint>
#include <cstdlib>
#include <set>
#include <string>
#include <tuple>

#include "core/allocation_merge.h"
#include "kubeletapi/pod_resources_decode.h"

namespace {

void require(bool condition) {
  if (!condition) std::abort();
}

const std::vector<std::string> kGlobs = {"nvidia.com/gpu", "nvidia.com/mig-*"};
const std::vector<std::string> kDraDrivers = {"gpu.*"};

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  v1::ListPodResourcesResponse response;
  if (!response.ParseFromArray(data, static_cast<int>(size))) return 0;
  const std::vector<gdw::PodResourcesContainer> listed = gdw::pod_resources_containers(response);

  // Live pods from the same names: every other listed container runs; a name whose first
  // byte is odd is held by two pods (a recreated pod whose old container still runs).
  gdw::LivePodIndex live;
  std::vector<gdw::AllocationEntry> checkpoint;
  std::set<std::string> checkpoint_uids;
  for (std::size_t i = 0; i < listed.size(); ++i) {
    const auto& c = listed[i];
    const gdw::PodName name{c.pod_namespace, c.pod_name};
    const std::string uid = "uid-" + c.pod_namespace + "/" + c.pod_name;
    if (i % 2 == 0) live.add(name, uid, c.container_name);
    if (!c.pod_name.empty() && (c.pod_name[0] & 1)) live.add(name, uid + "-old", c.container_name);
    if (i % 3 == 0) {
      for (const auto& [resource, ids] : c.devices) {
        checkpoint.push_back({uid + "-old", c.container_name, resource, ids, {}, {}, {}, {}, std::nullopt, {}});
        checkpoint_uids.insert(uid + "-old");
      }
    }
  }

  // Now and then a pod cgroup no bundle names yet: then no PodResources entry may be used.
  if (listed.size() % 4 == 3) live.saw_pod("uid-unnamed");

  for (auto mode : {gdw::AllocationSource::kAuto, gdw::AllocationSource::kPodResources,
                    gdw::AllocationSource::kCheckpoint}) {
    gdw::AllocationSources sources{&checkpoint, &listed, &live};
    gdw::MergedAllocations merged = gdw::merge_allocations(sources, mode, kGlobs, kDraDrivers);
    std::set<std::tuple<std::string, std::string, std::string, std::string>> keys;
    for (const auto& e : merged.entries) {
      require(keys.insert({e.pod_uid, e.container_name, e.resource, e.dra_claim}).second);
      // DRA claims come from PodResources alone: never in mode checkpoint, only to the
      // single live UID of their pod's name, and only claims with CDI devices.
      if (!e.dra_claim.empty()) {
        require(mode != gdw::AllocationSource::kCheckpoint && !e.cdi_devices.empty() && e.device_ids.empty());
        bool unique_live = false;
        for (const auto& [name, pod] : live.pods) unique_live |= pod.uid == e.pod_uid;
        require(unique_live && live.unnamed_uids.empty());
        continue;
      }
      bool unique_live = false;
      for (const auto& [name, pod] : live.pods) unique_live |= pod.uid == e.pod_uid;
      require(checkpoint_uids.count(e.pod_uid) > 0 || (unique_live && live.unnamed_uids.empty()));
      for (const auto& id : e.device_ids) require(!id.empty() && id.find("::") == std::string::npos);
    }
    require(merged.ambiguous.size() == live.ambiguous.size());
    for (const auto& a : merged.ambiguous) require(a.uids.size() >= 1);
  }
  return 0;
}
