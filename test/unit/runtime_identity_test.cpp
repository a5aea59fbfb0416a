// Who a container is, from what its runtime itself wrote and the kernel-enforced cgroup path,
// never from anything a pod can set: CRI-O copies every pod annotation into config.json,
// containerd those its pod_annotations list passes through.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "core/allocation_merge.h"
#include "node/container_target.h"
#include "runtime/oci_config.h"

namespace gdw {
namespace {

using json = nlohmann::json;

constexpr const char* kTenantUid = "11111111-2222-4333-a444-555555555555";
constexpr const char* kVictimUid = "99999999-8888-4777-a666-555555555555";
const std::string kCrioId(64, 'c');
const std::string kContainerdId(64, 'd');

json crio_labels(const std::string& ns, const std::string& pod, const std::string& uid, const std::string& container) {
  return {{"io.kubernetes.pod.namespace", ns}, {"io.kubernetes.pod.name", pod},
          {"io.kubernetes.pod.uid", uid}, {"io.kubernetes.container.name", container}};
}

// The tenant's annotations as a pod sets them, naming the victim in every key it can think of.
json spoofed_annotations() {
  return {{"io.kubernetes.cri.container-type", "container"},
          {"io.kubernetes.cri.container-name", "victim-main"},
          {"io.kubernetes.cri.sandbox-name", "victim-0"},
          {"io.kubernetes.cri.sandbox-namespace", "prod"},
          {"io.kubernetes.cri.sandbox-uid", kVictimUid},
          {"io.kubernetes.pod.name", "victim-0"},
          {"io.kubernetes.pod.namespace", "prod"},
          {"io.kubernetes.pod.uid", kVictimUid},
          {"io.kubernetes.container.name", "victim-main"}};
}

// A CRI-O config.json for the tenant: the pod's annotations first, then CRI-O's own keys.
std::string crio_bundle(const json& labels, json annotations = spoofed_annotations(),
                        const std::string& cgroups_path = std::string("/kubepods/pod") + kTenantUid + "/crio-" + kCrioId) {
  annotations["io.kubernetes.cri-o.ContainerType"] = "container";
  annotations["io.kubernetes.cri-o.ContainerID"] = kCrioId;
  annotations["io.kubernetes.cri-o.SandboxID"] = std::string(64, 'e');
  annotations["io.kubernetes.cri-o.Labels"] = labels.dump();
  return json{{"annotations", annotations}, {"linux", {{"cgroupsPath", cgroups_path}}}}.dump();
}

DiscoveredContainer cgroup_of(const std::string& pod_uid, const std::string& id, RuntimeKind runtime) {
  DiscoveredContainer cg;
  cg.pod_dir = "/sys/fs/cgroup/devices/kubepods/pod" + pod_uid;
  cg.cgroup_dir = cg.pod_dir + "/" + id;
  cg.pod.pod_uid = pod_uid;
  cg.leaf.container_id = id;
  cg.leaf.runtime = runtime;
  return cg;
}

Bundle bundle_of(const std::string& id, const std::string& text, RuntimeKind layout) {
  auto info = parse_oci_config(text, layout);
  EXPECT_TRUE(info.ok()) << info.error().message;
  return Bundle{id, "/run/" + id + "/config.json", info.ok() ? *info : OciContainerInfo{}};
}

TEST(RuntimeIdentity, CrioIgnoresSpoofedCriKeysAndPodAnnotations) {
  auto info = parse_oci_config(crio_bundle(crio_labels("team-a", "tenant-0", kTenantUid, "main")), RuntimeKind::kCrio);
  ASSERT_TRUE(info.ok()) << info.error().message;
  EXPECT_EQ(info->runtime, RuntimeKind::kCrio);
  EXPECT_EQ(info->type, ContainerType::kContainer);
  EXPECT_EQ(info->pod_namespace, "team-a");
  EXPECT_EQ(info->pod_name, "tenant-0");
  EXPECT_EQ(info->pod_uid, kTenantUid);
  EXPECT_EQ(info->container_name, "main");
  EXPECT_EQ(info->container_id, kCrioId);
}

TEST(RuntimeIdentity, CrioWithoutLabelsNamesNobodyEvenWithPodAnnotations) {
  json annotations = spoofed_annotations();
  annotations["io.kubernetes.cri-o.ContainerType"] = "container";
  auto info = parse_oci_config(json{{"annotations", annotations}}.dump(), RuntimeKind::kCrio);
  ASSERT_TRUE(info.ok());
  EXPECT_EQ(info->pod_name, "");
  EXPECT_EQ(info->container_name, "");
  Bundle b{kCrioId, "/x/userdata/config.json", *info};
  Identification id = identify_container(cgroup_of(kTenantUid, kCrioId, RuntimeKind::kCrio), &b);
  EXPECT_EQ(id.kind, TargetKind::kUnidentified);
  EXPECT_FALSE(id.identity);
}

TEST(RuntimeIdentity, ContainerdUsesItsCriKeysAndIgnoresPassedThroughCrioKeys) {
  json annotations = {
      // passed through from the pod
      {"io.kubernetes.cri-o.Labels", crio_labels("prod", "victim-0", kVictimUid, "victim-main").dump()},
      {"io.kubernetes.pod.name", "victim-0"},
      // containerd's own, written after the pass-through
      {"io.kubernetes.cri.container-type", "container"},
      {"io.kubernetes.cri.container-name", "main"},
      {"io.kubernetes.cri.sandbox-name", "tenant-0"},
      {"io.kubernetes.cri.sandbox-namespace", "team-a"},
      {"io.kubernetes.cri.sandbox-uid", kTenantUid}};
  auto info = parse_oci_config(json{{"annotations", annotations}}.dump(), RuntimeKind::kContainerd);
  ASSERT_TRUE(info.ok());
  EXPECT_EQ(info->runtime, RuntimeKind::kContainerd);
  EXPECT_EQ(info->pod_name, "tenant-0");
  EXPECT_EQ(info->pod_namespace, "team-a");
  EXPECT_EQ(info->pod_uid, kTenantUid);
  EXPECT_EQ(info->container_name, "main");
}

TEST(RuntimeIdentity, UnknownRuntimeNamesNobody) {
  // No layout and both runtimes' keys: either set could be a pod's.
  auto both = parse_oci_config(crio_bundle(crio_labels("team-a", "tenant-0", kTenantUid, "main")));
  ASSERT_TRUE(both.ok());
  EXPECT_EQ(both->runtime, RuntimeKind::kUnknown);
  EXPECT_EQ(both->pod_name, "");
  EXPECT_NE(both->identity_problem, "");
  // CRI-O's layout without CRI-O's marker (only a pod's cri keys).
  auto unmarked = parse_oci_config(json{{"annotations", spoofed_annotations()}}.dump(), RuntimeKind::kCrio);
  ASSERT_TRUE(unmarked.ok());
  EXPECT_EQ(unmarked->runtime, RuntimeKind::kUnknown);
  EXPECT_EQ(unmarked->container_name, "");
  // No annotations at all.
  auto bare = parse_oci_config(R"({"linux": {}})", RuntimeKind::kContainerd);
  ASSERT_TRUE(bare.ok());
  EXPECT_EQ(bare->runtime, RuntimeKind::kUnknown);

  Bundle b{kContainerdId, "/x/config.json", *unmarked};
  ContainerTarget t = resolve_container(cgroup_of(kTenantUid, kContainerdId, RuntimeKind::kUnknown), &b, {}, {}, {});
  EXPECT_EQ(t.kind, TargetKind::kUnidentified);
  EXPECT_NE(t.problem.find("names nobody"), std::string::npos) << t.problem;
  // Without a layout, one runtime's keys alone decide.
  auto crio_only = parse_oci_config(crio_bundle(crio_labels("team-a", "tenant-0", kTenantUid, "main"), json::object()));
  ASSERT_TRUE(crio_only.ok());
  EXPECT_EQ(crio_only->runtime, RuntimeKind::kCrio);
}

// Both pods hold a GPU; the tenant's bundle must never reach the victim's.
AllocationIndex two_pod_allocations(const DesiredPolicy& policy) {
  AllocationEntry victim{kVictimUid, "victim-main", "nvidia.com/gpu", {"GPU-victim"}, {}, {}, {}, {}, std::nullopt, {}};
  AllocationEntry tenant{kTenantUid, "main", "nvidia.com/gpu", {"GPU-tenant"}, {}, {}, {}, {}, std::nullopt, {}};
  return AllocationIndex({victim, tenant}, policy);
}

TEST(RuntimeIdentity, ABundleWhoseUidDisagreesWithTheCgroupIsNotUsed) {
  const DesiredPolicy policy{{"nvidia.com/gpu"}, {}};
  const AllocationIndex allocations = two_pod_allocations(policy);
  // The tenant's container cgroup, with a bundle claiming the victim's pod (stated UID).
  Bundle stated = bundle_of(kCrioId, crio_bundle(crio_labels("prod", "victim-0", kVictimUid, "victim-main")),
                            RuntimeKind::kCrio);
  ContainerTarget t = resolve_container(cgroup_of(kTenantUid, kCrioId, RuntimeKind::kCrio), &stated, allocations, {}, policy);
  EXPECT_EQ(t.kind, TargetKind::kUnidentified);
  EXPECT_TRUE(t.identity_conflict);
  EXPECT_FALSE(t.identity);
  EXPECT_TRUE(t.desired.wanted.empty());
  EXPECT_FALSE(t.desired.holds_gpu);
  EXPECT_NE(t.problem.find(kVictimUid), std::string::npos) << t.problem;

  // linux.cgroupsPath in another pod than the cgroup the container runs in.
  Bundle moved = bundle_of(kCrioId,
                           crio_bundle(crio_labels("team-a", "tenant-0", "", "main"), json::object(),
                                       std::string("/kubepods/pod") + kVictimUid + "/crio-" + kCrioId),
                           RuntimeKind::kCrio);
  t = resolve_container(cgroup_of(kTenantUid, kCrioId, RuntimeKind::kCrio), &moved, allocations, {}, policy);
  EXPECT_EQ(t.kind, TargetKind::kUnidentified);
  EXPECT_TRUE(t.identity_conflict);

  // A CRI-O bundle under a containerd leaf, or naming another container ID.
  Bundle honest = bundle_of(kCrioId, crio_bundle(crio_labels("team-a", "tenant-0", kTenantUid, "main")), RuntimeKind::kCrio);
  t = resolve_container(cgroup_of(kTenantUid, kCrioId, RuntimeKind::kContainerd), &honest, allocations, {}, policy);
  EXPECT_TRUE(t.identity_conflict);
  t = resolve_container(cgroup_of(kTenantUid, std::string(64, 'f'), RuntimeKind::kCrio), &honest, allocations, {}, policy);
  EXPECT_TRUE(t.identity_conflict);

  // The same bundle under its own cgroup: identified, with the tenant's own allocation only.
  t = resolve_container(cgroup_of(kTenantUid, kCrioId, RuntimeKind::kCrio), &honest, allocations, {}, policy);
  ASSERT_TRUE(t.identity);
  EXPECT_FALSE(t.identity_conflict);
  EXPECT_EQ(t.identity->pod_uid, kTenantUid);
  EXPECT_EQ(t.identity->pod_name, "tenant-0");
  EXPECT_TRUE(t.desired.holds_gpu);
}

TEST(RuntimeIdentity, LivePodsTakeTheUidFromTheCgroupAndNamesFromTheRuntime) {
  Bundle honest = bundle_of(kCrioId, crio_bundle(crio_labels("team-a", "tenant-0", kTenantUid, "main")), RuntimeKind::kCrio);
  Bundle liar = bundle_of(kContainerdId, crio_bundle(crio_labels("prod", "victim-0", kVictimUid, "victim-main")),
                          RuntimeKind::kCrio);
  std::map<std::string, const Bundle*> bundles{{kCrioId, &honest}, {kContainerdId, &liar}};
  std::vector<DiscoveredContainer> running{cgroup_of(kTenantUid, kCrioId, RuntimeKind::kCrio),
                                           cgroup_of(kTenantUid, kContainerdId, RuntimeKind::kCrio)};
  LivePodIndex live = collect_live_pods(running, {}, [&](const std::string& id) { return bundles.at(id); });
  ASSERT_EQ(live.pods.size(), 1u);
  EXPECT_EQ(live.pods.begin()->first, (PodName{"team-a", "tenant-0"}));
  EXPECT_EQ(live.pods.begin()->second.uid, kTenantUid);
  EXPECT_TRUE(live.ambiguous.empty());
}

TEST(LivePodIndex, ANameWithTwoUidsIsAmbiguousAndSoIsAUidWithTwoNames) {
  LivePodIndex live;
  live.add({"ml", "train-0"}, "uid-old", "worker");
  live.add({"ml", "train-0"}, "uid-new", "worker");
  live.add({"ml", "train-0"}, "uid-newest", "worker");
  live.add({"ml", "web"}, "uid-web", "nginx");
  EXPECT_EQ(live.ambiguous.at({"ml", "train-0"}), (std::set<std::string>{"uid-old", "uid-new", "uid-newest"}));
  EXPECT_EQ(live.pods.count({"ml", "train-0"}), 0u);
  EXPECT_EQ(live.pods.at({"ml", "web"}).uid, "uid-web");

  live.add({"ml", "web-2"}, "uid-web", "nginx");  // one UID under two names: one bundle is wrong
  EXPECT_EQ(live.pods.count({"ml", "web"}), 0u);
  EXPECT_EQ(live.ambiguous.count({"ml", "web"}), 1u);
  EXPECT_EQ(live.ambiguous.count({"ml", "web-2"}), 1u);
}

TEST(MergeAllocations, AnAmbiguousNameUsesNoPodResourcesEntryButTheCheckpointStillApplies) {
  LivePodIndex live;
  live.add({"ml", "train-0"}, "uid-old", "worker");
  live.add({"ml", "train-0"}, "uid-new", "worker");
  live.add({"ml", "other"}, "uid-other", "worker");
  std::vector<AllocationEntry> checkpoint = {
      {"uid-old", "worker", "nvidia.com/gpu", {"GPU-old"}, {}, {}, {}, {}, std::nullopt, {}}};
  std::vector<PodResourcesContainer> listed = {{"ml", "train-0", "worker", {{"nvidia.com/gpu", {"GPU-new"}}}},
                                               {"ml", "other", "worker", {{"nvidia.com/gpu", {"GPU-other"}}}}};
  for (auto mode : {AllocationSource::kAuto, AllocationSource::kPodResources}) {
    MergedAllocations merged =
        merge_allocations({&checkpoint, &listed, &live}, mode, {"nvidia.com/gpu"});
    for (const auto& e : merged.entries) {
      EXPECT_NE(e.pod_uid, "uid-new");
      EXPECT_TRUE(e.pod_uid != "uid-old" || e.device_ids == std::vector<std::string>{"GPU-old"});
    }
    ASSERT_EQ(merged.ambiguous.size(), 1u);
    EXPECT_EQ(merged.ambiguous[0].name, (PodName{"ml", "train-0"}));
    EXPECT_EQ(merged.ambiguous[0].uids, (std::vector<std::string>{"uid-new", "uid-old"}));
    EXPECT_EQ(merged.ambiguous[0].unused_pod_resources, std::vector<std::string>{"ml/train-0/worker"});
    EXPECT_TRUE(merged.unmapped_containers.empty());
    const bool checkpoint_used = mode == AllocationSource::kAuto;
    EXPECT_EQ(merged.entries.size(), checkpoint_used ? 2u : 1u);
    EXPECT_NE(describe(merged.ambiguous[0]).find("uid-new"), std::string::npos);
  }
}

TEST(MergeAllocations, WhileAPodOnTheNodeHasNoKnownNameNoPodResourcesEntryIsUsed) {
  // A new ml/train-0 whose sandbox does not exist yet (its pod cgroup does) while the old
  // one still runs: the name looks unique, but the unnamed pod could be the one kubelet lists.
  const std::string old_id(64, 'a');
  Bundle old_bundle = bundle_of(old_id, json{{"annotations", {{"io.kubernetes.cri.container-type", "container"},
                                                              {"io.kubernetes.cri.container-name", "worker"},
                                                              {"io.kubernetes.cri.sandbox-name", "train-0"},
                                                              {"io.kubernetes.cri.sandbox-namespace", "ml"}}}}.dump(),
                                RuntimeKind::kContainerd);
  std::vector<DiscoveredContainer> running{cgroup_of("uid-old", old_id, RuntimeKind::kContainerd)};
  LivePodIndex live = collect_live_pods(running, {"uid-old", "uid-new"}, [&](const std::string&) { return &old_bundle; });
  EXPECT_EQ(live.unnamed_uids, std::set<std::string>{"uid-new"});
  std::vector<AllocationEntry> checkpoint = {
      {"uid-old", "worker", "nvidia.com/gpu", {"GPU-old"}, {}, {}, {}, {}, std::nullopt, {}}};
  std::vector<PodResourcesContainer> listed = {{"ml", "train-0", "worker", {{"nvidia.com/gpu", {"GPU-new"}}}}};
  MergedAllocations merged = merge_allocations({&checkpoint, &listed, &live}, AllocationSource::kAuto, {"nvidia.com/gpu"});
  ASSERT_EQ(merged.entries.size(), 1u);
  EXPECT_EQ(merged.entries[0].device_ids, std::vector<std::string>{"GPU-old"});
  EXPECT_EQ(merged.unnamed_pods, std::vector<std::string>{"uid-new"});
  EXPECT_EQ(merged.unused_pod_resources_unnamed, std::vector<std::string>{"ml/train-0/worker"});

  // Once its sandbox names it, the name is ambiguous instead; the checkpoint still applies.
  live.add({"ml", "train-0"}, "uid-new", "");
  EXPECT_TRUE(live.unnamed_uids.empty());
  merged = merge_allocations({&checkpoint, &listed, &live}, AllocationSource::kAuto, {"nvidia.com/gpu"});
  ASSERT_EQ(merged.entries.size(), 1u);
  EXPECT_EQ(merged.entries[0].device_ids, std::vector<std::string>{"GPU-old"});
  EXPECT_EQ(merged.ambiguous.size(), 1u);
}

TEST(OciConfigNumbers, DeviceNumbersThatAreNot32BitAreErrors) {
  auto rule = [](const std::string& major) {
    return parse_oci_config(R"({"linux": {"resources": {"devices": [{"allow": true, "type": "c", "major": )" + major +
                            R"(, "minor": 0, "access": "rw"}]}}})");
  };
  // Above INT64_MAX nlohmann stores the number unsigned; it used to wrap to -1, a wildcard.
  EXPECT_FALSE(rule("9223372036854775808").ok());
  EXPECT_FALSE(rule("18446744073709551615").ok());
  EXPECT_FALSE(rule("4294967295").ok());
  EXPECT_FALSE(rule("4294967296").ok());
  ASSERT_TRUE(rule("-1").ok());
  EXPECT_EQ(rule("-1")->device_rules[0].rule.major, kAnyNumber);
  ASSERT_TRUE(rule("4294967294").ok());
  EXPECT_EQ(rule("195")->device_rules[0].rule.major, 195u);
  EXPECT_FALSE(parse_oci_config(R"({"linux": {"devices": [{"path": "/dev/x", "major": 18446744073709551615}]}})").ok());
}

}  // namespace
}  // namespace gdw
