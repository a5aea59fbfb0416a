// Identity attacks on the running daemon, on the real kernel with a real gRPC PodResources
// server (kubelet.source: auto): a CRI-O pod whose annotations copy another pod's CRI keys,
// and two live pods with one namespace/name. Grants and denials are proven with open()
// from a process inside each container's cgroup: ENXIO = allowed, EPERM = denied.
#include <gtest/gtest.h>

#include <cerrno>
#include <nlohmann/json.hpp>
#include <thread>

#include "support/daemon_pod_resources_fixture.h"

namespace gdw::test {
namespace {

constexpr const char* kKubelet = "  pod_resources_interval: 200ms\n";

using DaemonIdentity = DaemonWithPodResourcesTest;

TEST_F(DaemonIdentity, ACrioPodCopyingAnotherPodsCriKeysGetsNoneOfItsDevices) {
  // The victim: a CRI-O GPU pod that only PodResources knows (so only that path grants),
  // and whose GPU the runtime hook did not grant: ENXIO later means the daemon granted it.
  const auto& victim = node_->add_container({.pod_namespace = "prod", .pod_name = "victim-0", .container_name = "main",
                                             .device_ids = {node_->gpu_uuid(0)}, .hook_grants_gpu = false,
                                             .hook_grants_uvm = false, .in_checkpoint = false,
                                             .runtime = RuntimeKind::kCrio});
  // The tenant: a CRI-O pod without devices, same container name, annotations naming the
  // victim's pod in containerd's keys (CRI-O copies them into its config.json).
  const auto& tenant = node_->add_container(
      {.pod_namespace = "team-a", .pod_name = "tenant-0", .container_name = "main", .runtime = RuntimeKind::kCrio,
       .pod_annotations = {{"io.kubernetes.cri.container-type", "container"},
                           {"io.kubernetes.cri.container-name", "main"},
                           {"io.kubernetes.cri.sandbox-name", "victim-0"},
                           {"io.kubernetes.cri.sandbox-namespace", "prod"},
                           {"io.kubernetes.pod.name", "victim-0"},
                           {"io.kubernetes.pod.namespace", "prod"},
                           {"io.kubernetes.container.name", "main"}}});
  node_->write_checkpoint();
  ASSERT_EQ(node_->open_errno(victim, "nvidia0"), EPERM);
  ASSERT_EQ(node_->open_errno(tenant, "nvidia0"), EPERM);

  FakePodResources kubelet(node_->pod_resources_socket());
  kubelet.set_response(one_container_listing("prod", "victim-0", "main", node_->gpu_uuid(0)));
  ASSERT_TRUE(daemon_->start("", false, kKubelet)) << daemon_->output();

  // The victim's container gets its GPU and the control nodes from the PodResources entry...
  EXPECT_TRUE(daemon_->eventually_errno(victim, "nvidia0", ENXIO)) << daemon_->output();
  EXPECT_EQ(node_->open_errno(victim, "nvidiactl"), ENXIO);
  let_pod_resources_settle(kubelet);
  // ...and the tenant none of them.
  EXPECT_EQ(node_->open_errno(tenant, "nvidia0"), EPERM) << daemon_->output();
  EXPECT_EQ(node_->open_errno(tenant, "nvidiactl"), EPERM);
  EXPECT_EQ(node_->open_errno(tenant, "nvidia-uvm"), EPERM);
  EXPECT_EQ(daemon_->metric("gpu_devwatch_containers_watched"), 1) << daemon_->metrics();
  EXPECT_EQ(daemon_->metric("gpu_devwatch_ambiguous_pod_identities"), 0);
}

TEST_F(DaemonIdentity, ACrioBundleClaimingAnotherPodsUidIsReportedAndNotUsed) {
  const auto& victim = node_->add_container({.pod_namespace = "prod", .pod_name = "victim-0", .container_name = "main",
                                             .device_ids = {node_->gpu_uuid(0)}, .hook_grants_gpu = false,
                                             .hook_grants_uvm = false, .runtime = RuntimeKind::kCrio});
  // A bundle whose runtime keys name the victim's pod, UID included, under the tenant's cgroup
  // (what a runtime bug or a forged file would look like): the cgroup decides, it is not used.
  const auto& tenant = node_->add_container({.pod_namespace = "prod", .pod_name = "victim-0", .container_name = "main",
                                             .with_bundle = false, .runtime = RuntimeKind::kCrio});
  nlohmann::json labels = {{"io.kubernetes.pod.name", "victim-0"}, {"io.kubernetes.pod.namespace", "prod"},
                           {"io.kubernetes.pod.uid", victim.spec.pod_uid}, {"io.kubernetes.container.name", "main"}};
  nlohmann::json bundle = {{"annotations",
                            {{"io.kubernetes.cri-o.ContainerType", "container"},
                             {"io.kubernetes.cri-o.ContainerID", tenant.id},
                             {"io.kubernetes.cri-o.Labels", labels.dump()}}}};
  make_dirs(node_->crio_state_dir() + "/" + tenant.id + "/userdata");
  write_file(node_->crio_state_dir() + "/" + tenant.id + "/userdata/config.json", bundle.dump());
  node_->write_checkpoint();

  ASSERT_TRUE(daemon_->start()) << daemon_->output();
  EXPECT_TRUE(daemon_->eventually_errno(victim, "nvidia0", ENXIO)) << daemon_->output();
  EXPECT_TRUE(eventually([&] { return daemon_->metric("gpu_devwatch_identity_conflicts") == 1; })) << daemon_->metrics();
  EXPECT_EQ(node_->open_errno(tenant, "nvidia0"), EPERM);
  EXPECT_EQ(node_->open_errno(tenant, "nvidiactl"), EPERM);
  EXPECT_TRUE(daemon_->process().wait_for_output("identity not used")) << daemon_->output();

  CommandResult check = run_command({GDW_BINARY, "check", "--json", "--config", daemon_->config_path()});
  auto doc = nlohmann::json::parse(check.out, nullptr, false);
  ASSERT_FALSE(doc.is_discarded()) << check.out << check.err;
  ASSERT_EQ(doc["unidentified"].size(), 1u) << check.out;
  EXPECT_EQ(doc["unidentified"][0]["identity_conflict"], true);
  EXPECT_EQ(doc["unidentified"][0]["container_id"], tenant.id);
}

TEST_F(DaemonIdentity, TwoLivePodsWithOneNameUseNoPodResourcesEntryButTheirCheckpointEntries) {
  // A pod recreated while the old one's container still runs: both are ml/train-0.
  // The old pod's allocation is in the checkpoint (by UID); PodResources lists the name with
  // the new pod's GPU, which only the name ties to either pod.
  const auto& old_pod = node_->add_container({.pod_namespace = "ml", .pod_name = "train-0", .container_name = "worker",
                                              .device_ids = {node_->gpu_uuid(0)}, .hook_grants_gpu = false,
                                              .hook_grants_uvm = false});
  const auto& new_pod = node_->add_container({.pod_namespace = "ml", .pod_name = "train-0", .container_name = "worker",
                                              .device_ids = {node_->gpu_uuid(1)}, .hook_grants_gpu = false,
                                              .hook_grants_uvm = false, .in_checkpoint = false,
                                              .runtime = RuntimeKind::kCrio});
  node_->write_checkpoint();
  FakePodResources kubelet(node_->pod_resources_socket());
  kubelet.set_response(one_container_listing("ml", "train-0", "worker", node_->gpu_uuid(1)));
  ASSERT_TRUE(daemon_->start("", false, kKubelet)) << daemon_->output();

  // The checkpoint entry (keyed by UID) still applies to the old pod.
  EXPECT_TRUE(daemon_->eventually_errno(old_pod, "nvidia0", ENXIO)) << daemon_->output();
  EXPECT_TRUE(eventually([&] { return daemon_->metric("gpu_devwatch_ambiguous_pod_identities") == 1; }))
      << daemon_->metrics();
  let_pod_resources_settle(kubelet);
  // The PodResources entry for the name is used for neither pod.
  EXPECT_EQ(node_->open_errno(old_pod, "nvidia1"), EPERM) << daemon_->output();
  EXPECT_EQ(node_->open_errno(new_pod, "nvidia1"), EPERM);
  EXPECT_EQ(node_->open_errno(new_pod, "nvidia0"), EPERM);
  EXPECT_EQ(node_->open_errno(new_pod, "nvidiactl"), EPERM);
  EXPECT_TRUE(daemon_->process().wait_for_output("pod name ml/train-0 is ambiguous")) << daemon_->output();

  // `check` says so too, in text and JSON (and asks for attention: exit 1).
  const std::string config = daemon_->config_path();
  CommandResult text = run_command({GDW_BINARY, "check", "--config", config});
  EXPECT_EQ(text.exit_code, 1) << text.out << text.err;
  EXPECT_NE(text.out.find("AMBIGUOUS pod name ml/train-0 is ambiguous"), std::string::npos) << text.out;
  CommandResult js = run_command({GDW_BINARY, "check", "--json", "--config", config});
  auto doc = nlohmann::json::parse(js.out, nullptr, false);
  ASSERT_FALSE(doc.is_discarded()) << js.out << js.err;
  ASSERT_EQ(doc["ambiguous_pod_names"].size(), 1u) << js.out;
  EXPECT_EQ(doc["ambiguous_pod_names"][0]["pod"], "train-0");
  EXPECT_EQ(doc["ambiguous_pod_names"][0]["uids"].size(), 2u);
  EXPECT_EQ(doc["ambiguous_pod_names"][0]["unused_pod_resources"][0], "ml/train-0/worker");
}

}  // namespace
}  // namespace gdw::test
