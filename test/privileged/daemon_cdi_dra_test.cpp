// CDI and DRA allocations on the running daemon, on the real kernel: a real gRPC
// PodResources server listing dynamic_resources, real CDI spec files in the sandbox's
// cdi.spec_dirs, and time-sliced resources with the default config. Grants and denials are
// proven with open() from a process inside each container's cgroup: ENXIO = allowed (no
// driver behind the node), EPERM = denied.
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>

#include <cerrno>
#include <cstdio>
#include <nlohmann/json.hpp>
#include <thread>

#include "support/daemon_pod_resources_fixture.h"

namespace gdw::test {
namespace {

constexpr const char* kKubelet = "  pod_resources_interval: 200ms\n";

// A per-claim spec as NVIDIA's DRA kubelet plugin writes it: the claim's GPU, and the
// control nodes in the spec-level edits.
std::string claim_spec(const std::string& device, const std::string& gpu_node) {
  return "cdiVersion: 0.8.0\nkind: k8s.gpu.nvidia.com/claim\ndevices:\n- name: " + device +
         "\n  containerEdits:\n    deviceNodes:\n    - path: /dev/" + gpu_node +
         "\ncontainerEdits:\n  deviceNodes:\n  - path: /dev/nvidiactl\n  - path: /dev/nvidia-uvm\n";
}

// As drivers and nvidia-ctk do: a dot-prefixed temporary renamed into place.
void write_spec(const std::string& dir, const std::string& name, const std::string& text) {
  const std::string tmp = dir + "/." + name + ".tmp";
  write_file(tmp, text);
  ASSERT_EQ(std::rename(tmp.c_str(), (dir + "/" + name).c_str()), 0);
}

class DaemonCdiDra : public DaemonWithPodResourcesTest {
 protected:
  nlohmann::json check_json() {
    CommandResult r = run_command({GDW_BINARY, "check", "--json", "--config", daemon_->config_path()});
    auto doc = nlohmann::json::parse(r.out, nullptr, false);
    EXPECT_FALSE(doc.is_discarded()) << r.out << r.err;
    return doc;
  }
};

// A container whose GPU only a DRA claim gives (no device plugin, no hook grant).
SandboxContainerSpec claim_holder(const std::string& ns, const std::string& pod) {
  return {.pod_namespace = ns, .pod_name = pod, .container_name = "main", .hook_grants_gpu = false,
          .hook_grants_uvm = false, .in_checkpoint = false};
}

TEST_F(DaemonCdiDra, ADraClaimGetsExactlyItsCdiNodesAndAnotherDriversClaimNothing) {
  write_spec(node_->cdi_run_dir(), "k8s.gpu.nvidia.com-claim_ml.yaml", claim_spec("claim-0-gpu-0", "nvidia0"));
  // A non-GPU driver's CDI device that happens to name the other GPU.
  write_spec(node_->cdi_etc_dir(), "example.com-nic.json",
             R"({"cdiVersion":"0.6.0","kind":"example.com/nic","devices":[{"name":"0",
                 "containerEdits":{"deviceNodes":[{"path":"/dev/nvidia1"}]}}]})");
  const auto& gpu = node_->add_container(claim_holder("ml", "train-0"));
  const auto& nic = node_->add_container(claim_holder("net", "router-0"));
  node_->write_checkpoint();
  ASSERT_EQ(node_->open_errno(gpu, "nvidia0"), EPERM);

  FakePodResources kubelet(node_->pod_resources_socket());
  v1::ListPodResourcesResponse listing;
  add_dra_claim_listing(listing, "ml", "train-0", "main", "gpu-claim", "gpu.nvidia.com",
                        {"k8s.gpu.nvidia.com/claim=claim-0-gpu-0"});
  add_dra_claim_listing(listing, "net", "router-0", "main", "nic-claim", "nic.example.com", {"example.com/nic=0"});
  kubelet.set_response(listing);
  ASSERT_TRUE(daemon_->start("", false, kKubelet)) << daemon_->output();

  // The claim's GPU and its spec-level nodes...
  EXPECT_TRUE(daemon_->eventually_errno(gpu, "nvidia0", ENXIO)) << daemon_->output();
  EXPECT_EQ(node_->open_errno(gpu, "nvidiactl"), ENXIO);
  EXPECT_EQ(node_->open_errno(gpu, "nvidia-uvm"), ENXIO);
  // ...and after a revocation again: exactly those.
  node_->reapply_spec(gpu);  // deny `a`, then the spec's allows: the claim's nodes are gone
  EXPECT_TRUE(daemon_->eventually_errno(gpu, "nvidia0", ENXIO)) << daemon_->output();
  EXPECT_TRUE(daemon_->eventually_errno(gpu, "nvidia-uvm", ENXIO));
  // It was taken and given back (not merely never taken): the revocation was seen.
  const std::map<std::string, std::string> gpu0 = {
      {"namespace", "ml"}, {"pod", "train-0"}, {"container", "main"}, {"device", "nvidia0"}};
  EXPECT_TRUE(eventually([&] { return daemon_->metric("gpu_devwatch_drift_total", gpu0) >= 1; })) << daemon_->metrics();
  let_pod_resources_settle(kubelet);
  EXPECT_EQ(node_->open_errno(gpu, "nvidia1"), EPERM);
  // devices.control is not added to a claim: nvidia-uvm-tools is in neither spec.
  EXPECT_EQ(node_->open_errno(gpu, "nvidia-uvm-tools"), EPERM);
  // The other driver's claim is no GPU allocation: nothing granted, not watched.
  EXPECT_EQ(node_->open_errno(nic, "nvidia1"), EPERM);
  EXPECT_EQ(node_->open_errno(nic, "nvidia0"), EPERM);
  EXPECT_EQ(node_->open_errno(nic, "nvidiactl"), EPERM);
  EXPECT_EQ(daemon_->metric("gpu_devwatch_containers_watched"), 1) << daemon_->metrics();
  EXPECT_EQ(daemon_->metric("gpu_devwatch_cdi_unresolved_devices"), 0);
}

TEST_F(DaemonCdiDra, DevicePluginCdiNamesResolveThroughTheSpecFile) {
  // deviceListStrategy cdi-cri: AllocResp carries the CDI name; the spec adds a node no
  // device ID implies (a render node), which only the spec can explain.
  const std::string render = node_->dev_root() + "/dri/renderD128";
  make_dirs(node_->dev_root() + "/dri");
  ASSERT_EQ(::mknod(render.c_str(), S_IFCHR | 0666, makedev(226, 128)), 0);
  const std::string uuid = node_->gpu_uuid(1);
  write_spec(node_->cdi_etc_dir(), "nvidia.yaml",
             "cdiVersion: 0.5.0\nkind: nvidia.com/gpu\ndevices:\n- name: " + uuid +
                 "\n  containerEdits:\n    deviceNodes:\n    - path: /dev/nvidia1\n    - path: /dev/dri/renderD128\n");
  const auto& c = node_->add_container({.pod_namespace = "ml", .pod_name = "infer-0", .container_name = "main",
                                        .device_ids = {uuid}, .cdi_devices = {"nvidia.com/gpu=" + uuid},
                                        .hook_grants_gpu = false, .hook_grants_uvm = false});
  node_->write_checkpoint();
  ASSERT_EQ(node_->open_errno(c, "dri/renderD128"), EPERM);
  ASSERT_TRUE(daemon_->start()) << daemon_->output();

  EXPECT_TRUE(daemon_->eventually_errno(c, "dri/renderD128", ENXIO)) << daemon_->output();
  EXPECT_EQ(node_->open_errno(c, "nvidia1"), ENXIO);
  node_->reapply_spec(c);
  EXPECT_TRUE(daemon_->eventually_errno(c, "dri/renderD128", ENXIO)) << daemon_->output();
  EXPECT_TRUE(daemon_->eventually_errno(c, "nvidia1", ENXIO));
  EXPECT_EQ(node_->open_errno(c, "nvidia0"), EPERM);
}

TEST_F(DaemonCdiDra, AnUnresolvableNameIsReportedAndABadSpecNamedWhileTheOthersApply) {
  // A spec that does not parse, and a good one beside it.
  write_spec(node_->cdi_etc_dir(), "broken.json", R"({"cdiVersion": "0.8.0", "kind": "k8s.gpu.nvidia.com/claim")");
  write_spec(node_->cdi_run_dir(), "k8s.gpu.nvidia.com-claim_early.yaml", claim_spec("early-gpu-0", "nvidia0"));
  const auto& early = node_->add_container(claim_holder("ml", "early-0"));
  const auto& late = node_->add_container(claim_holder("ml", "late-0"));
  node_->write_checkpoint();
  FakePodResources kubelet(node_->pod_resources_socket());
  v1::ListPodResourcesResponse listing;
  add_dra_claim_listing(listing, "ml", "early-0", "main", "early", "gpu.nvidia.com",
                        {"k8s.gpu.nvidia.com/claim=early-gpu-0"});
  add_dra_claim_listing(listing, "ml", "late-0", "main", "late", "gpu.nvidia.com",
                        {"k8s.gpu.nvidia.com/claim=late-gpu-1"});
  kubelet.set_response(listing);
  ASSERT_TRUE(daemon_->start("", false, kKubelet)) << daemon_->output();

  // The good spec applies; the bad one is named.
  EXPECT_TRUE(daemon_->eventually_errno(early, "nvidia0", ENXIO)) << daemon_->output();
  EXPECT_TRUE(daemon_->process().wait_for_output(node_->cdi_etc_dir() + "/broken.json: not valid JSON"))
      << daemon_->output();
  EXPECT_TRUE(eventually([&] { return daemon_->metric("gpu_devwatch_cdi_unresolved_devices") == 1; }))
      << daemon_->metrics();
  EXPECT_EQ(daemon_->metric("gpu_devwatch_cdi_spec_errors"), 1);
  // Nothing is granted for the name no spec defines.
  EXPECT_EQ(node_->open_errno(late, "nvidia1"), EPERM);
  EXPECT_EQ(node_->open_errno(late, "nvidia0"), EPERM);
  EXPECT_EQ(node_->open_errno(late, "nvidiactl"), EPERM);

  // `check` says both, and asks for attention.
  CommandResult text = run_command({GDW_BINARY, "check", "--config", daemon_->config_path()});
  EXPECT_EQ(text.exit_code, 1) << text.out << text.err;
  EXPECT_NE(text.out.find("NOT USED " + node_->cdi_etc_dir() + "/broken.json"), std::string::npos) << text.out;
  EXPECT_NE(text.out.find("CDI device k8s.gpu.nvidia.com/claim=late-gpu-1"), std::string::npos) << text.out;
  nlohmann::json doc = check_json();
  ASSERT_EQ(doc["cdi"]["spec_errors"].size(), 1u) << doc.dump(2);
  bool reported = false;
  for (const auto& c : doc["containers"]) {
    if (c["unresolved_cdi"] == nlohmann::json::array({"k8s.gpu.nvidia.com/claim=late-gpu-1"})) reported = true;
  }
  EXPECT_TRUE(reported) << doc["containers"].dump(2);

  // The driver writes the claim's spec late: picked up at once (inotify, not the 60 s resync).
  write_spec(node_->cdi_run_dir(), "k8s.gpu.nvidia.com-claim_late.yaml", claim_spec("late-gpu-1", "nvidia1"));
  EXPECT_TRUE(daemon_->eventually_errno(late, "nvidia1", ENXIO)) << daemon_->output();
  EXPECT_TRUE(eventually([&] { return daemon_->metric("gpu_devwatch_cdi_unresolved_devices") == 0; }))
      << daemon_->metrics();
  EXPECT_EQ(node_->open_errno(late, "nvidia0"), EPERM);
  EXPECT_EQ(node_->open_errno(early, "nvidia1"), EPERM);
}

TEST_F(DaemonCdiDra, ATimeSlicedGpuSharedReplicaIsRepairedWithTheDefaultConfig) {
  // renameByDefault: true → nvidia.com/gpu.shared, device IDs with a replica suffix.
  const auto& c = node_->add_container({.pod_namespace = "ml", .pod_name = "shared-0", .container_name = "main",
                                        .resource = "nvidia.com/gpu.shared",
                                        .device_ids = {node_->gpu_uuid(0) + "::3"}, .hook_grants_gpu = false,
                                        .hook_grants_uvm = false});
  node_->write_checkpoint();
  ASSERT_EQ(node_->open_errno(c, "nvidia0"), EPERM);
  ASSERT_TRUE(daemon_->start()) << daemon_->output();
  EXPECT_TRUE(daemon_->eventually_errno(c, "nvidia0", ENXIO)) << daemon_->output();
  EXPECT_EQ(node_->open_errno(c, "nvidiactl"), ENXIO);
  node_->reapply_spec(c);
  EXPECT_TRUE(daemon_->eventually_errno(c, "nvidia0", ENXIO)) << daemon_->output();
  EXPECT_EQ(node_->open_errno(c, "nvidia1"), EPERM);
}

}  // namespace
}  // namespace gdw::test
