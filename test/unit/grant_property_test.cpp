// The grant decision as a property over random nodes: pods (some sharing a namespace/name),
// containers of either runtime, bundles carrying arbitrary pod annotations (including keys
// copying other pods' names and UIDs in both runtimes' formats), checkpoint and PodResources
// entries, DRA claims in PodResources (GPU drivers' and another driver's, resolved through
// CDI devices). Through the daemon's own path (collect_live_pods → merge_allocations →
// AllocationIndex → resolve_container/compute_desired), no container is ever granted a
// device outside its own pod UID's allocation plus the control nodes.
#include <gtest/gtest.h>

#include <algorithm>
#include <nlohmann/json.hpp>
#include <random>
#include <set>

#include "core/allocation_merge.h"
#include "node/container_target.h"
#include "runtime/oci_config.h"

namespace gdw {
namespace {

using json = nlohmann::json;

constexpr int kGpus = 6;
const DesiredPolicy kPolicy{{"nvidia.com/gpu"}, {"nvidiactl", "nvidia-uvm"}, EnvVisiblePolicy::kReport,
                            {"gpu.nvidia.com"}};
std::string claim_cdi(int gpu) { return "k8s.gpu.nvidia.com/device=gpu-" + std::to_string(gpu); }
std::string nic_cdi(int gpu) { return "example.com/nic=" + std::to_string(gpu); }  // names a GPU node too

std::string gpu_uuid(int i) { return "GPU-0000000" + std::to_string(i) + "-e770-3ea8-8ac3-8a1d41970000"; }

Inventory inventory() {
  Inventory inv;
  inv.char_majors = {{"nvidia", 195}, {"nvidia-uvm", 237}};
  for (int i = 0; i < kGpus; ++i) {
    inv.gpus.push_back({gpu_uuid(i), static_cast<std::uint32_t>(i), "", "", false});
    inv.dev_nodes["nvidia" + std::to_string(i)] = {DeviceType::kChar, 195, static_cast<std::uint32_t>(i)};
  }
  inv.dev_nodes["nvidiactl"] = {DeviceType::kChar, 195, 255};
  inv.dev_nodes["nvidia-uvm"] = {DeviceType::kChar, 237, 0};
  // CDI devices of the DRA driver (with its spec-level control node) and of a NIC driver.
  for (int i = 0; i < kGpus; ++i) {
    const auto minor = static_cast<std::uint32_t>(i);
    inv.cdi_devices[claim_cdi(i)] = {{"/dev/nvidia" + std::to_string(i), std::nullopt, ""},
                                     {"/dev/nvidiactl", std::nullopt, ""}};
    inv.cdi_devices[nic_cdi(i)] = {{"/dev/nvidia" + std::to_string(i), DeviceNumber{DeviceType::kChar, 195, minor}, ""}};
  }
  return inv;
}

struct Pod {
  std::string uid, ns, name;
  RuntimeKind runtime = RuntimeKind::kContainerd;
  std::map<std::string, std::vector<std::string>> devices;  // container → GPU UUIDs (the truth)
  std::map<std::string, std::vector<int>> claim_gpus;       // container → GPUs of its DRA claim (truth too)
  std::map<std::string, std::vector<int>> nic_claims;       // container → another driver's claim: no GPU
  std::vector<std::string> container_ids;                   // parallel to devices' keys
};

class NodeGenerator {
 public:
  explicit NodeGenerator(std::uint64_t seed) : rng_(seed) {}
  int pick(int n) { return std::uniform_int_distribution<int>(0, n - 1)(rng_); }
  bool chance(int percent) { return pick(100) < percent; }
  std::string hex(std::size_t n) {
    std::string s;
    for (std::size_t i = 0; i < n; ++i) s += "0123456789abcdef"[pick(16)];
    return s;
  }
  std::string uid() {
    std::string h = hex(32);
    return h.substr(0, 8) + "-" + h.substr(8, 4) + "-4" + h.substr(13, 3) + "-a" + h.substr(17, 3) + "-" + h.substr(20, 12);
  }

  std::vector<Pod> pods() {
    std::vector<Pod> out(1 + pick(6));
    for (auto& p : out) {
      p.uid = uid();
      p.ns = pick(2) ? "ml" : "web";
      p.name = "p" + std::to_string(pick(3));  // few names: duplicates are common
      p.runtime = pick(2) ? RuntimeKind::kCrio : RuntimeKind::kContainerd;
      for (int c = 0, n = 1 + pick(3); c < n; ++c) {
        auto& ids = p.devices["c" + std::to_string(c)];
        for (int g = 0; g < kGpus; ++g)
          if (chance(20)) ids.push_back(gpu_uuid(g));
        p.container_ids.push_back(hex(64));
        const std::string name = "c" + std::to_string(c);
        for (int g = 0; g < kGpus; ++g) {
          if (chance(10)) p.claim_gpus[name].push_back(g);
          if (chance(10)) p.nic_claims[name].push_back(g);
        }
      }
    }
    return out;
  }

  // What a pod can put into its own annotations: anything, including other pods' identities
  // in both runtimes' formats.
  json pod_annotations(const std::vector<Pod>& pods) {
    json a = json::object();
    for (int i = 0, n = pick(4); i < n; ++i) {
      const Pod& other = pods[pick(static_cast<int>(pods.size()))];
      const std::string container = "c" + std::to_string(pick(3));
      switch (pick(5)) {
        case 0:
          a["io.kubernetes.cri.container-type"] = "container";
          a["io.kubernetes.cri.sandbox-name"] = other.name;
          a["io.kubernetes.cri.sandbox-namespace"] = other.ns;
          a["io.kubernetes.cri.sandbox-uid"] = other.uid;
          a["io.kubernetes.cri.container-name"] = container;
          break;
        case 1:
          a["io.kubernetes.cri-o.ContainerType"] = "container";
          a["io.kubernetes.cri-o.Labels"] = json{{"io.kubernetes.pod.name", other.name},
                                                 {"io.kubernetes.pod.namespace", other.ns},
                                                 {"io.kubernetes.pod.uid", other.uid},
                                                 {"io.kubernetes.container.name", container}}.dump();
          a["io.kubernetes.cri-o.ContainerID"] = other.container_ids[0];
          break;
        case 2:
          a["io.kubernetes.pod.name"] = other.name;
          a["io.kubernetes.pod.namespace"] = other.ns;
          a["io.kubernetes.pod.uid"] = other.uid;
          a["io.kubernetes.container.name"] = container;
          break;
        case 3: a["io.kubernetes.cri.sandbox-uid"] = other.uid; break;
        default: a["example.com/" + hex(4)] = hex(8); break;
      }
    }
    return a;
  }

  // The config.json the runtime writes: the pod's annotations, then its own keys.
  std::string bundle(const Pod& p, const std::string& container, const std::string& id, const std::vector<Pod>& pods) {
    json a = pod_annotations(pods);
    const bool old_containerd = chance(20);  // < 1.6.11: no sandbox-uid
    if (p.runtime == RuntimeKind::kContainerd) {
      a["io.kubernetes.cri.container-type"] = "container";
      a["io.kubernetes.cri.container-name"] = container;
      a["io.kubernetes.cri.sandbox-name"] = p.name;
      a["io.kubernetes.cri.sandbox-namespace"] = p.ns;
      a["io.kubernetes.cri.sandbox-id"] = hex(64);
      if (!old_containerd) a["io.kubernetes.cri.sandbox-uid"] = p.uid;
    } else {
      a["io.kubernetes.cri-o.ContainerType"] = "container";
      a["io.kubernetes.cri-o.ContainerID"] = id;
      a["io.kubernetes.cri-o.SandboxID"] = hex(64);
      a["io.kubernetes.cri-o.Labels"] = json{{"io.kubernetes.pod.name", p.name},
                                             {"io.kubernetes.pod.namespace", p.ns},
                                             {"io.kubernetes.pod.uid", p.uid},
                                             {"io.kubernetes.container.name", container}}.dump();
    }
    const std::string leaf = p.runtime == RuntimeKind::kCrio ? "crio-" + id : id;
    return json{{"annotations", a}, {"linux", {{"cgroupsPath", "/kubepods/pod" + p.uid + "/" + leaf}}}}.dump();
  }

 private:
  std::mt19937_64 rng_;
};

std::set<DeviceNumber> allowed_for(const Pod& pod) {
  std::set<DeviceNumber> allowed{{DeviceType::kChar, 195, 255}, {DeviceType::kChar, 237, 0}};
  for (const auto& [container, ids] : pod.devices)
    for (const auto& id : ids)
      for (int g = 0; g < kGpus; ++g)
        if (id == gpu_uuid(g)) allowed.insert({DeviceType::kChar, 195, static_cast<std::uint32_t>(g)});
  for (const auto& [container, gpus] : pod.claim_gpus)
    for (int g : gpus) allowed.insert({DeviceType::kChar, 195, static_cast<std::uint32_t>(g)});
  return allowed;
}

TEST(GrantProperty, NoContainerIsEverGrantedOutsideItsOwnPodsAllocation) {
  const Inventory inv = inventory();
  std::size_t granted_containers = 0, ambiguous_names = 0, claim_grants = 0;
  for (std::uint64_t seed = 1; seed <= 3000; ++seed) {
    NodeGenerator gen(seed);
    const std::vector<Pod> pods = gen.pods();

    // The node: cgroups (the kernel's truth) and the runtimes' bundles.
    std::vector<DiscoveredContainer> running;
    std::map<std::string, Bundle> bundles;
    std::map<std::string, const Pod*> pod_of_uid;
    for (const auto& p : pods) {
      pod_of_uid[p.uid] = &p;
      std::size_t i = 0;
      for (const auto& [container, ids] : p.devices) {
        const std::string& id = p.container_ids[i++];
        DiscoveredContainer cg;
        cg.pod.pod_uid = p.uid;
        cg.pod_dir = "/kubepods/pod" + p.uid;
        cg.cgroup_dir = cg.pod_dir + "/" + id;
        cg.leaf.container_id = id;
        cg.leaf.runtime = p.runtime == RuntimeKind::kCrio ? RuntimeKind::kCrio
                                                           : (gen.chance(50) ? RuntimeKind::kContainerd : RuntimeKind::kUnknown);
        running.push_back(cg);
        if (gen.chance(90)) {
          auto info = parse_oci_config(gen.bundle(p, container, id, pods), p.runtime);
          ASSERT_TRUE(info.ok()) << info.error().message;
          bundles[id] = Bundle{id, "/run/" + id + "/config.json", *info};
        }
      }
    }
    // kubelet's records. The checkpoint is keyed by UID; PodResources by name, and lists at
    // most one pod per name (kubelet's current one), sometimes none.
    std::vector<AllocationEntry> checkpoint;
    std::vector<PodResourcesContainer> listed;
    std::set<PodName> listed_names;
    for (const auto& p : pods) {
      const bool in_checkpoint = gen.chance(60);
      const bool in_pod_resources = gen.chance(70) && listed_names.insert({p.ns, p.name}).second;
      for (const auto& [container, ids] : p.devices) {
        if (in_checkpoint && !ids.empty())
          checkpoint.push_back({p.uid, container, "nvidia.com/gpu", ids, {}, {}, {}, {}, std::nullopt, {}});
        if (!in_pod_resources) continue;
        PodResourcesContainer c{p.ns, p.name, container, {{"nvidia.com/gpu", ids}}, {}};
        DraClaimDevice claim{p.ns, container + "-gpu", "gpu.nvidia.com", "pool", "dev", {}};
        if (auto it = p.claim_gpus.find(container); it != p.claim_gpus.end())
          for (int g : it->second) claim.cdi_devices.push_back(claim_cdi(g));
        DraClaimDevice nic{p.ns, container + "-nic", "nic.example.com", "pool", "dev", {}};
        if (auto it = p.nic_claims.find(container); it != p.nic_claims.end())
          for (int g : it->second) nic.cdi_devices.push_back(nic_cdi(g));
        c.claims = {claim, nic};
        listed.push_back(std::move(c));
      }
    }

    std::vector<std::string> pod_uids;
    for (const auto& p : pods) pod_uids.push_back(p.uid);
    LivePodIndex live = collect_live_pods(running, pod_uids, [&](const std::string& id) -> const Bundle* {
      auto it = bundles.find(id);
      return it == bundles.end() ? nullptr : &it->second;
    });
    ambiguous_names += live.ambiguous.size();
    for (auto mode : {AllocationSource::kAuto, AllocationSource::kPodResources, AllocationSource::kCheckpoint}) {
      MergedAllocations merged =
          merge_allocations({&checkpoint, &listed, &live}, mode, kPolicy.resource_globs, kPolicy.dra_driver_globs);
      AllocationIndex index(merged.entries, kPolicy);
      for (const auto& cg : running) {
        auto b = bundles.find(cg.leaf.container_id);
        ContainerTarget t = resolve_container(cg, b == bundles.end() ? nullptr : &b->second, index, inv, kPolicy);
        const std::set<DeviceNumber> allowed = allowed_for(*pod_of_uid.at(cg.pod.pod_uid));
        for (const auto& w : t.desired.wanted) {
          ASSERT_TRUE(allowed.count(w.dev)) << "seed " << seed << ": container " << cg.leaf.container_id << " of pod "
                                            << cg.pod.pod_uid << " granted " << w.name << " (" << w.reason << ")";
        }
        granted_containers += !t.desired.wanted.empty();
        const auto* entries = t.identity ? index.find(cg.pod.pod_uid, t.identity->container_name) : nullptr;
        if (entries && !t.desired.wanted.empty() && std::any_of(entries->begin(), entries->end(), is_dra))
          ++claim_grants;
      }
    }
  }
  // The generator must exercise both grants and ambiguity, or the property says nothing.
  EXPECT_GT(granted_containers, 1000u);
  EXPECT_GT(ambiguous_names, 100u);
  EXPECT_GT(claim_grants, 100u);
}

}  // namespace
}  // namespace gdw
