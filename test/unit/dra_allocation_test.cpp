// DRA through PodResources: the wire answer (dynamic_resources, field 5) decoded into
// PodResourcesContainer claims, and the merge that turns claims of watched drivers into
// allocation entries under the identity rules of names (ambiguous and unnamed pods).
#include <gtest/gtest.h>

#include "core/allocation_merge.h"
#include "core/desired_state.h"
#include "kubeletapi/pod_resources_decode.h"

namespace gdw {
namespace {

const std::vector<std::string> kGlobs = {"nvidia.com/gpu"};
const std::vector<std::string> kDrivers = {"gpu.nvidia.com", "gpu.amd.com", "gpu.intel.com"};

v1::ListPodResourcesResponse wire_answer() {
  v1::ListPodResourcesResponse response;
  auto* pod = response.add_pod_resources();
  pod->set_name("train-0");
  pod->set_namespace_("ml");
  auto* c = pod->add_containers();
  c->set_name("worker");
  auto* plugin = c->add_devices();
  plugin->set_resource_name("nvidia.com/gpu");
  plugin->add_device_ids("GPU-a");
  auto* claim = c->add_dynamic_resources();
  claim->set_claim_name("gpu-claim");
  claim->set_claim_namespace("ml");
  auto* nvidia = claim->add_claim_resources();
  nvidia->set_driver_name("gpu.nvidia.com");
  nvidia->set_pool_name("node-1");
  nvidia->set_device_name("gpu-1");
  nvidia->add_cdi_devices()->set_name("k8s.gpu.nvidia.com/device=gpu-1");
  nvidia->add_cdi_devices()->set_name("k8s.gpu.nvidia.com/claim=uid-gpu-1");
  auto* nic = claim->add_claim_resources();
  nic->set_driver_name("nic.example.com");
  nic->add_cdi_devices()->set_name("example.com/nic=0");
  return response;
}

TEST(DraDecode, DynamicResourcesBecomeOneClaimDevicePerClaimResource) {
  // Through the wire bytes, as gRPC hands them over.
  v1::ListPodResourcesResponse parsed;
  ASSERT_TRUE(parsed.ParseFromString(wire_answer().SerializeAsString()));
  auto containers = pod_resources_containers(parsed);
  ASSERT_EQ(containers.size(), 1u);
  const auto& c = containers[0];
  EXPECT_EQ(c.devices.at("nvidia.com/gpu"), (std::vector<std::string>{"GPU-a"}));
  ASSERT_EQ(c.claims.size(), 2u);
  EXPECT_EQ(c.claims[0], (DraClaimDevice{"ml", "gpu-claim", "gpu.nvidia.com", "node-1", "gpu-1",
                                         {"k8s.gpu.nvidia.com/device=gpu-1", "k8s.gpu.nvidia.com/claim=uid-gpu-1"}}));
  EXPECT_EQ(c.claims[1].driver, "nic.example.com");
  EXPECT_EQ(c.claims[1].cdi_devices, (std::vector<std::string>{"example.com/nic=0"}));
}

LivePodIndex live_pods() {
  LivePodIndex live;
  live.add({"ml", "train-0"}, "uid-train", "worker");
  return live;
}

TEST(DraMerge, ClaimsOfWatchedDriversBecomeEntriesOfTheLivePod) {
  auto listed = pod_resources_containers(wire_answer());
  LivePodIndex live = live_pods();
  std::vector<AllocationEntry> checkpoint = {
      {"uid-train", "worker", "nvidia.com/gpu", {"GPU-a"}, {}, {}, {}, {}, std::nullopt, {}}};
  for (auto mode : {AllocationSource::kAuto, AllocationSource::kPodResources}) {
    MergedAllocations merged = merge_allocations({&checkpoint, &listed, &live}, mode, kGlobs, kDrivers);
    ASSERT_EQ(merged.entries.size(), 2u) << to_string(mode);
    // Sorted by key: "dra …" before "nvidia.com/gpu".
    const AllocationEntry& claim = merged.entries[0];
    EXPECT_EQ(claim.pod_uid, "uid-train");
    EXPECT_EQ(claim.container_name, "worker");
    EXPECT_EQ(claim.resource, "gpu.nvidia.com");
    EXPECT_EQ(claim.dra_claim, "ml/gpu-claim");
    EXPECT_EQ(claim.cdi_devices,
              (std::vector<std::string>{"k8s.gpu.nvidia.com/device=gpu-1", "k8s.gpu.nvidia.com/claim=uid-gpu-1"}));
    EXPECT_TRUE(claim.device_ids.empty());
    EXPECT_EQ(merged.entries[1].resource, "nvidia.com/gpu");
    // DRA has no checkpoint side to disagree with.
    EXPECT_TRUE(merged.disagreements.empty()) << describe(merged.disagreements[0]);
  }
  // kubelet.source: checkpoint asks no PodResources: no claims.
  MergedAllocations merged = merge_allocations({&checkpoint, &listed, &live}, AllocationSource::kCheckpoint, kGlobs, kDrivers);
  ASSERT_EQ(merged.entries.size(), 1u);
  EXPECT_FALSE(is_dra(merged.entries[0]));
  // No driver globs: no claims.
  merged = merge_allocations({&checkpoint, &listed, &live}, AllocationSource::kAuto, kGlobs);
  EXPECT_EQ(merged.entries.size(), 1u);
}

TEST(DraMerge, AmbiguousUnnamedAndNotYetLivePodsGetNoClaim) {
  auto listed = pod_resources_containers(wire_answer());
  listed[0].devices.clear();  // the claim alone
  // Two live UIDs for ml/train-0.
  LivePodIndex ambiguous = live_pods();
  ambiguous.add({"ml", "train-0"}, "uid-old", "worker");
  MergedAllocations merged = merge_allocations({nullptr, &listed, &ambiguous}, AllocationSource::kAuto, kGlobs, kDrivers);
  EXPECT_TRUE(merged.entries.empty());
  ASSERT_EQ(merged.ambiguous.size(), 1u);
  EXPECT_EQ(merged.ambiguous[0].unused_pod_resources, (std::vector<std::string>{"ml/train-0/worker"}));
  // A pod cgroup without a known name.
  LivePodIndex unnamed = live_pods();
  unnamed.saw_pod("uid-mystery");
  merged = merge_allocations({nullptr, &listed, &unnamed}, AllocationSource::kAuto, kGlobs, kDrivers);
  EXPECT_TRUE(merged.entries.empty());
  EXPECT_EQ(merged.unused_pod_resources_unnamed, (std::vector<std::string>{"ml/train-0/worker"}));
  // The pod's bundle not seen yet.
  LivePodIndex none;
  merged = merge_allocations({nullptr, &listed, &none}, AllocationSource::kAuto, kGlobs, kDrivers);
  EXPECT_TRUE(merged.entries.empty());
  EXPECT_EQ(merged.unmapped_containers, (std::vector<std::string>{"ml/train-0/worker"}));
}

TEST(DraMerge, DriverGlobsAndEmptyClaims) {
  PodResourcesContainer c{"ml", "train-0", "worker", {}, {}};
  c.claims.push_back({"ml", "a", "gpu.intel.com", "", "", {"intel.com/gpu=card0"}});
  c.claims.push_back({"ml", "b", "gpu.nvidia.com", "", "", {}});  // no CDI device: nothing to grant
  c.claims.push_back({"ml", "c", "gpu.nvidia.com.evil.com", "", "", {"x.com/y=z"}});
  std::vector<PodResourcesContainer> listed{c};
  LivePodIndex live = live_pods();
  MergedAllocations merged = merge_allocations({nullptr, &listed, &live}, AllocationSource::kAuto, kGlobs, kDrivers);
  ASSERT_EQ(merged.entries.size(), 1u);
  EXPECT_EQ(merged.entries[0].resource, "gpu.intel.com");
  EXPECT_EQ(merged.entries[0].dra_claim, "ml/a");
  merged = merge_allocations({nullptr, &listed, &live}, AllocationSource::kAuto, kGlobs, {"gpu.*"});
  EXPECT_EQ(merged.entries.size(), 2u);
}

}  // namespace
}  // namespace gdw
