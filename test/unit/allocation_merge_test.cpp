#include "core/allocation_merge.h"

#include <gtest/gtest.h>

namespace gdw {
namespace {

const std::vector<std::string> kGlobs = {"nvidia.com/gpu", "nvidia.com/mig-*"};
constexpr const char* kGpu = "nvidia.com/gpu";

AllocationEntry checkpoint_entry(const std::string& uid, const std::string& container,
                                 std::vector<std::string> ids, const std::string& resource = kGpu) {
  AllocationEntry e;
  e.pod_uid = uid;
  e.container_name = container;
  e.resource = resource;
  e.device_ids = std::move(ids);
  e.envs = {{"NVIDIA_VISIBLE_DEVICES", "from-checkpoint"}};
  e.device_specs = {{"/dev/nvidia0", "/dev/nvidia0", "rw"}};
  return e;
}

PodResourcesContainer listed(const std::string& ns, const std::string& pod, const std::string& container,
                             std::map<std::string, std::vector<std::string>> devices = {}) {
  return {ns, pod, container, std::move(devices)};
}

// The pods running now: train-0 (uid-train, containers worker + sidecar) and web (uid-web).
LivePods live_pods() {
  return {
      {{"ml", "train-0"}, {"uid-train", {"worker", "sidecar"}}},
      {{"default", "web"}, {"uid-web", {"nginx"}}},
  };
}

struct Row {
  std::string uid, container, resource;
  std::vector<std::string> ids;
  bool has_alloc_resp = false;
  bool operator==(const Row&) const = default;
};
std::ostream& operator<<(std::ostream& os, const Row& r) {
  os << r.uid << "/" << r.container << "/" << r.resource << " [";
  for (const auto& id : r.ids) os << id << " ";
  return os << "] alloc_resp=" << r.has_alloc_resp;
}

std::vector<Row> rows(const MergedAllocations& merged) {
  std::vector<Row> out;
  for (const auto& e : merged.entries) {
    out.push_back({e.pod_uid, e.container_name, e.resource, e.device_ids, !e.device_specs.empty() || !e.envs.empty()});
  }
  return out;
}

MergedAllocations merge(const std::vector<AllocationEntry>* checkpoint,
                        const std::vector<PodResourcesContainer>* pod_resources, AllocationSource mode,
                        const LivePods& live = live_pods()) {
  LivePodIndex index;
  index.pods = live;
  return merge_allocations({checkpoint, pod_resources, &index}, mode, kGlobs);
}

TEST(MergeAllocations, AutoKeepsTheCheckpointEntryWhenBothAgree) {
  std::vector<AllocationEntry> checkpoint = {checkpoint_entry("uid-train", "worker", {"GPU-a", "GPU-b"})};
  // Same devices, other order, one replica-suffixed twice: still the same set.
  std::vector<PodResourcesContainer> live = {
      listed("ml", "train-0", "worker", {{kGpu, {"GPU-b::1", "GPU-a", "GPU-b::2"}}})};

  MergedAllocations merged = merge(&checkpoint, &live, AllocationSource::kAuto);

  EXPECT_EQ(rows(merged), (std::vector<Row>{{"uid-train", "worker", kGpu, {"GPU-a", "GPU-b"}, true}}));
  EXPECT_EQ(merged.entries[0].device_specs, checkpoint[0].device_specs);
  EXPECT_TRUE(merged.disagreements.empty());
}

TEST(MergeAllocations, AutoPrefersPodResourcesWhenTheDevicesDiffer) {
  std::vector<AllocationEntry> checkpoint = {checkpoint_entry("uid-train", "worker", {"GPU-a"})};
  std::vector<PodResourcesContainer> live = {listed("ml", "train-0", "worker", {{kGpu, {"GPU-c"}}})};

  MergedAllocations merged = merge(&checkpoint, &live, AllocationSource::kAuto);

  // The AllocResp described GPU-a: it does not travel with GPU-c.
  EXPECT_EQ(rows(merged), (std::vector<Row>{{"uid-train", "worker", kGpu, {"GPU-c"}, false}}));
  ASSERT_EQ(merged.disagreements.size(), 1u);
  const AllocationDisagreement& d = merged.disagreements[0];
  EXPECT_EQ(d.kind, DisagreementKind::kDifferentDevices);
  EXPECT_EQ(d.pod_uid, "uid-train");
  EXPECT_EQ(d.pod_namespace, "ml");
  EXPECT_EQ(d.pod_name, "train-0");
  EXPECT_EQ(d.container_name, "worker");
  EXPECT_EQ(d.checkpoint_ids, std::vector<std::string>{"GPU-a"});
  EXPECT_EQ(d.pod_resources_ids, std::vector<std::string>{"GPU-c"});
  EXPECT_EQ(describe(d),
            "different-devices: pod ml/train-0 (uid uid-train) container worker resource nvidia.com/gpu: "
            "checkpoint [GPU-a], PodResources [GPU-c]");
}

TEST(MergeAllocations, AutoTakesWhatOnlyPodResourcesListsAndReportsIt) {
  std::vector<AllocationEntry> checkpoint;
  std::vector<PodResourcesContainer> live = {listed("default", "web", "nginx", {{kGpu, {"GPU-d::3"}}})};

  MergedAllocations merged = merge(&checkpoint, &live, AllocationSource::kAuto);

  EXPECT_EQ(rows(merged), (std::vector<Row>{{"uid-web", "nginx", kGpu, {"GPU-d"}, false}}));
  ASSERT_EQ(merged.disagreements.size(), 1u);
  EXPECT_EQ(merged.disagreements[0].kind, DisagreementKind::kOnlyInPodResources);
  EXPECT_EQ(merged.disagreements[0].pod_resources_ids, std::vector<std::string>{"GPU-d"});
}

TEST(MergeAllocations, AutoKeepsCheckpointOnlyEntriesAndReportsOnlyRunningContainersOfListedPods) {
  std::vector<AllocationEntry> checkpoint = {
      checkpoint_entry("uid-train", "worker", {"GPU-a"}),      // running, PodResources lists its pod: reported
      checkpoint_entry("uid-train", "init-weights", {"GPU-b"}),  // finished init container: normal
      checkpoint_entry("uid-gone", "old", {"GPU-c"}),          // pod not running, not yet collected: normal
      checkpoint_entry("uid-web", "nginx", {"GPU-d"}),         // running, but newer than the PodResources answer
  };
  std::vector<PodResourcesContainer> live = {listed("ml", "train-0", "worker"), listed("ml", "train-0", "sidecar")};

  MergedAllocations merged = merge(&checkpoint, &live, AllocationSource::kAuto);

  EXPECT_EQ(rows(merged), (std::vector<Row>{{"uid-gone", "old", kGpu, {"GPU-c"}, true},
                                            {"uid-train", "init-weights", kGpu, {"GPU-b"}, true},
                                            {"uid-train", "worker", kGpu, {"GPU-a"}, true},
                                            {"uid-web", "nginx", kGpu, {"GPU-d"}, true}}));
  ASSERT_EQ(merged.disagreements.size(), 1u);
  EXPECT_EQ(merged.disagreements[0].kind, DisagreementKind::kOnlyInCheckpoint);
  EXPECT_EQ(merged.disagreements[0].container_name, "worker");
  EXPECT_EQ(merged.disagreements[0].checkpoint_ids, std::vector<std::string>{"GPU-a"});
  EXPECT_TRUE(merged.disagreements[0].pod_resources_ids.empty());
}

TEST(MergeAllocations, AutoComparesPerResource) {
  std::vector<AllocationEntry> checkpoint = {checkpoint_entry("uid-train", "worker", {"GPU-a"}),
                                             checkpoint_entry("uid-train", "worker", {"MIG-m"}, "nvidia.com/mig-1g.12gb")};
  std::vector<PodResourcesContainer> live = {listed("ml", "train-0", "worker", {{kGpu, {"GPU-a"}}})};

  MergedAllocations merged = merge(&checkpoint, &live, AllocationSource::kAuto);

  EXPECT_EQ(merged.entries.size(), 2u);
  ASSERT_EQ(merged.disagreements.size(), 1u);
  EXPECT_EQ(merged.disagreements[0].kind, DisagreementKind::kOnlyInCheckpoint);
  EXPECT_EQ(merged.disagreements[0].resource, "nvidia.com/mig-1g.12gb");
}

TEST(MergeAllocations, AutoWithOneSourceMissingUsesTheOtherWithoutComparing) {
  std::vector<AllocationEntry> checkpoint = {checkpoint_entry("uid-train", "worker", {"GPU-a"})};
  std::vector<PodResourcesContainer> live = {listed("ml", "train-0", "worker", {{kGpu, {"GPU-c"}}})};

  MergedAllocations no_answer = merge(&checkpoint, nullptr, AllocationSource::kAuto);
  EXPECT_EQ(rows(no_answer), (std::vector<Row>{{"uid-train", "worker", kGpu, {"GPU-a"}, true}}));
  EXPECT_TRUE(no_answer.disagreements.empty());

  MergedAllocations no_checkpoint = merge(nullptr, &live, AllocationSource::kAuto);
  EXPECT_EQ(rows(no_checkpoint), (std::vector<Row>{{"uid-train", "worker", kGpu, {"GPU-c"}, false}}));
  EXPECT_TRUE(no_checkpoint.disagreements.empty());

  EXPECT_TRUE(merge(nullptr, nullptr, AllocationSource::kAuto).entries.empty());
}

TEST(MergeAllocations, CheckpointModeIgnoresPodResources) {
  std::vector<AllocationEntry> checkpoint = {checkpoint_entry("uid-train", "worker", {"GPU-a::1", "GPU-a::2"})};
  std::vector<PodResourcesContainer> live = {listed("ml", "train-0", "worker", {{kGpu, {"GPU-c"}}}),
                                             listed("default", "web", "nginx", {{kGpu, {"GPU-d"}}})};

  MergedAllocations merged = merge(&checkpoint, &live, AllocationSource::kCheckpoint);

  EXPECT_EQ(rows(merged), (std::vector<Row>{{"uid-train", "worker", kGpu, {"GPU-a"}, true}}));
  EXPECT_TRUE(merged.disagreements.empty());
  EXPECT_TRUE(merged.unmapped_containers.empty());
}

TEST(MergeAllocations, PodResourcesModeUsesOnlyPodResourcesDeviceIds) {
  std::vector<AllocationEntry> checkpoint = {checkpoint_entry("uid-train", "worker", {"GPU-a"}),
                                             checkpoint_entry("uid-web", "nginx", {"GPU-d"})};
  std::vector<PodResourcesContainer> live = {listed("ml", "train-0", "worker", {{kGpu, {"GPU-a"}}})};

  MergedAllocations merged = merge(&checkpoint, &live, AllocationSource::kPodResources);

  EXPECT_EQ(rows(merged), (std::vector<Row>{{"uid-train", "worker", kGpu, {"GPU-a"}, false}}));
  EXPECT_TRUE(merged.disagreements.empty());
  EXPECT_TRUE(merge(&checkpoint, nullptr, AllocationSource::kPodResources).entries.empty());
}

TEST(MergeAllocations, ContainersOfPodsWithoutABundleYetAreUnmapped) {
  std::vector<AllocationEntry> checkpoint;
  std::vector<PodResourcesContainer> live = {listed("ml", "starting", "worker", {{kGpu, {"GPU-e"}}}),
                                             listed("ml", "starting", "no-gpu")};

  MergedAllocations merged = merge(&checkpoint, &live, AllocationSource::kAuto);

  EXPECT_TRUE(merged.entries.empty());
  EXPECT_TRUE(merged.disagreements.empty());
  EXPECT_EQ(merged.unmapped_containers, std::vector<std::string>{"ml/starting/worker"});
}

TEST(MergeAllocations, ResourcesOutsideTheGlobsAreLeftOut) {
  std::vector<AllocationEntry> checkpoint = {checkpoint_entry("uid-train", "worker", {"nic-1"}, "rdma/hca")};
  std::vector<PodResourcesContainer> live = {listed("ml", "train-0", "worker", {{"rdma/hca", {"nic-2"}}})};

  for (AllocationSource mode : {AllocationSource::kAuto, AllocationSource::kCheckpoint, AllocationSource::kPodResources}) {
    MergedAllocations merged = merge(&checkpoint, &live, mode);
    EXPECT_TRUE(merged.entries.empty()) << to_string(mode);
    EXPECT_TRUE(merged.disagreements.empty()) << to_string(mode);
  }
}

TEST(MergeAllocations, DuplicateRecordsOfOneContainerAreJoined) {
  std::vector<AllocationEntry> checkpoint = {checkpoint_entry("uid-train", "worker", {"GPU-a"}),
                                             checkpoint_entry("uid-train", "worker", {"GPU-b", "GPU-a"})};
  std::vector<PodResourcesContainer> live = {listed("ml", "train-0", "worker", {{kGpu, {"GPU-a", "GPU-b", "GPU-a"}}})};

  MergedAllocations merged = merge(&checkpoint, &live, AllocationSource::kAuto);

  EXPECT_EQ(rows(merged), (std::vector<Row>{{"uid-train", "worker", kGpu, {"GPU-a", "GPU-b"}, true}}));
  EXPECT_TRUE(merged.disagreements.empty());
}

}  // namespace
}  // namespace gdw
