// `gpu-devwatch check` against fixture trees, no root needed: the cgroup hierarchy is plain
// directories with devices.list files, /proc is test/fixtures/proc-h20-mig, NVML is the
// fake library. Covers what the real-kernel tests do not: CRI-O and docker layouts, MIG
// through NVML and through devices.mig_map, a hanging NVML, bad configuration.
#include <gtest/gtest.h>

#include <chrono>
#include <filesystem>
#include <nlohmann/json.hpp>

#include "kubelet/checkpoint.h"
#include "support/kubelet_grpc_fakes.h"
#include "support/process.h"
#include "support/temp_dir.h"

namespace gdw::test {
namespace {

namespace fs = std::filesystem;
using json = nlohmann::json;

constexpr const char* kGpu0 = "GPU-2f815c32-768d-d782-1073-db01d7b90215";
constexpr const char* kMig = "MIG-9d2b5c1e-3f4a-5b6c-8d7e-0f1a2b3c4d5e";
const std::string kCrioId = std::string(64, 'c');
const std::string kDockerId = std::string(64, 'd');
const std::string kContainerdId = std::string(64, 'a');
const std::string kSandboxId = std::string(64, 'b');

// A node: systemd-driver cgroup names, CRI-O and containerd bundles, an H20 in MIG mode.
class FixtureNode {
 public:
  FixtureNode() {
    fs::copy(std::string(GDW_TEST_FIXTURES) + "/proc-h20-mig", dir_ / "proc", fs::copy_options::recursive);
    dir_.mkdirs("dev");
  }
  const TempDir& dir() const { return dir_; }

  // A container cgroup with the given devices.list; `leaf` is the systemd scope name.
  void cgroup(const std::string& pod_uid, const std::string& leaf, const std::string& devices_list) {
    std::string uid_ = pod_uid;
    std::replace(uid_.begin(), uid_.end(), '-', '_');
    dir_.write("cgroup/devices/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod" + uid_ + ".slice/" +
                   leaf + "/devices.list",
               devices_list);
  }
  void crio_bundle(const std::string& id, const std::string& pod_uid, const std::string& ns, const std::string& pod,
                   const std::string& container, const std::string& type = "container") {
    // CRI-O's own keys: kubelet's labels as one JSON string (never plain pod annotations).
    json labels = {{"io.kubernetes.pod.uid", pod_uid},
                   {"io.kubernetes.pod.namespace", ns},
                   {"io.kubernetes.pod.name", pod},
                   {"io.kubernetes.container.name", container}};
    json doc = {{"annotations",
                 {{"io.kubernetes.cri-o.ContainerType", type},
                  {"io.kubernetes.cri-o.ContainerID", id},
                  {"io.kubernetes.cri-o.Labels", labels.dump()}}}};
    dir_.write("crio/" + id + "/userdata/config.json", doc.dump());
  }
  void containerd_bundle(const std::string& id, const std::string& pod_uid, const std::string& ns, const std::string& pod,
                         const std::string& container, const std::string& type = "container") {
    json doc = {{"annotations",
                 {{"io.kubernetes.cri.container-type", type},
                  {"io.kubernetes.cri.sandbox-uid", pod_uid},
                  {"io.kubernetes.cri.sandbox-namespace", ns},
                  {"io.kubernetes.cri.sandbox-name", pod},
                  {"io.kubernetes.cri.container-name", container}}}};
    dir_.write("containerd/" + id + "/config.json", doc.dump());
  }
  void checkpoint(const std::vector<CheckpointWriteEntry>& entries) {
    dir_.write("kubelet/kubelet_internal_checkpoint", write_checkpoint(entries, {{"nvidia.com/gpu", {kGpu0}}}));
  }
  // `devices_extra` continues the devices: section; `kubelet_extra` the kubelet: one.
  std::string config(const std::string& devices_extra = "", const std::string& kubelet_extra = "") {
    return dir_.write("config.yaml", "cgroup:\n  root: " + dir_ / "cgroup" + "\nkubelet:\n  checkpoint: " +
                                         dir_ / "kubelet/kubelet_internal_checkpoint" + "\n" + kubelet_extra +
                                         "runtime:\n  state_dirs: [" + dir_ / "crio" + ", " + dir_ / "containerd" +
                                         "]\ndevices:\n  dev_root: " + dir_ / "dev" + "\n  proc_root: " +
                                         dir_ / "proc" + "\n" + devices_extra);
  }

 private:
  TempDir dir_{"gdw-fixture-node"};
};

CheckpointWriteEntry entry(const std::string& uid, const std::string& container, const std::string& resource,
                           std::vector<std::string> ids) {
  CheckpointWriteEntry e;
  e.pod_uid = uid;
  e.container_name = container;
  e.resource = resource;
  e.device_ids_by_numa[0] = std::move(ids);
  return e;
}

std::vector<std::string> devices_of(const json& list) {
  std::vector<std::string> out;
  for (const auto& d : list) out.push_back(d["device"].get<std::string>() + "=" + d["rule"].get<std::string>());
  return out;
}

const json* container_named(const json& doc, const std::string& name) {
  for (const auto& c : doc["containers"])
    if (c["container"] == name) return &c;
  return nullptr;
}

const std::string kUid1 = "11111111-2222-4333-8444-555555555555";
const std::string kUid2 = "66666666-7777-4888-9999-000000000000";
const std::string kRuncList = "c 1:3 rwm\nc 1:5 rwm\nc 1:7 rwm\nc 5:0 rwm\nc 136:* rwm\nc *:* m\nb *:* m\n";

TEST(CheckFixture, MigThroughNvmlOnCrioWithSystemdNames) {
  FixtureNode node;
  node.cgroup(kUid1, "crio-" + kCrioId + ".scope", kRuncList + "c 195:0 rw\nc 195:255 rw\n");
  node.crio_bundle(kCrioId, kUid1, "ml", "mig-0", "worker");
  node.checkpoint({entry(kUid1, "worker", "nvidia.com/mig-1g.12gb", {std::string(kMig) + "::2"})});
  auto r = run_command({GDW_BINARY, "check", "--json", "--config", node.config("  nvml_library: " GDW_FAKE_NVML "\n")},
                       std::chrono::seconds(30),
                       {std::string("FAKE_NVML_DEVICES=") + kGpu0 + ":0;" + kMig + "@0/1/0"});
  ASSERT_EQ(r.exit_code, 1) << r.out << r.err;
  auto doc = json::parse(r.out);
  const json* c = container_named(doc, "worker");
  ASSERT_NE(c, nullptr) << r.out;
  EXPECT_EQ((*c)["namespace"], "ml");
  EXPECT_EQ((*c)["pod"], "mig-0");
  EXPECT_EQ(devices_of((*c)["missing"]),
            (std::vector<std::string>{"nvidia-caps/nvidia-cap12=c 238:12 rw", "nvidia-caps/nvidia-cap13=c 238:13 rw",
                                      "nvidia-uvm=c 239:0 rw", "nvidia-uvm-tools=c 239:1 rw"}));
  EXPECT_EQ(doc["inventory"]["mig_source"], "nvml");
}

TEST(CheckFixture, MigThroughTheConfiguredMap) {
  FixtureNode node;
  node.cgroup(kUid1, "crio-" + kCrioId + ".scope",
              "c 195:0 rw\nc 195:255 rw\nc 238:12 rw\nc 238:13 rw\nc 239:0 rw\nc 239:1 rw\n");
  node.crio_bundle(kCrioId, kUid1, "ml", "mig-0", "worker");
  node.checkpoint({entry(kUid1, "worker", "nvidia.com/mig-1g.12gb", {kMig})});
  auto r = run_command({GDW_BINARY, "check", "--config",
                        node.config(std::string("  mig_map:\n    ") + kMig + ": {gpu: 0, gi: 1, ci: 0}\n")});
  EXPECT_EQ(r.exit_code, 0) << r.out << r.err;
  EXPECT_NE(r.out.find("ml/mig-0/worker"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("MIG mapping from config"), std::string::npos) << r.out;
}

TEST(CheckFixture, HangingNvmlCostsOnlyItsDeadline) {
  FixtureNode node;
  node.cgroup(kUid1, "crio-" + kCrioId + ".scope", kRuncList);
  node.crio_bundle(kCrioId, kUid1, "ml", "mig-0", "worker");
  node.checkpoint({entry(kUid1, "worker", "nvidia.com/mig-1g.12gb", {kMig})});
  const auto start = std::chrono::steady_clock::now();
  auto r = run_command({GDW_BINARY, "check", "--config",
                        node.config("  nvml_library: " GDW_FAKE_NVML "\n  nvml_timeout: 500ms\n")},
                       std::chrono::seconds(30), {"FAKE_NVML_MODE=hang"});
  const auto took = std::chrono::steady_clock::now() - start;
  EXPECT_FALSE(r.timed_out);
  EXPECT_LT(took, std::chrono::seconds(5));
  EXPECT_EQ(r.exit_code, 1) << r.out << r.err;
  EXPECT_NE(r.out.find("NVML did not answer"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find(std::string(kMig) + ": MIG device not mapped"), std::string::npos) << r.out;
}

TEST(CheckFixture, DockerContainerWithoutBundleIsReportedAndSandboxesSkipped) {
  FixtureNode node;
  node.cgroup(kUid1, "cri-containerd-" + kContainerdId + ".scope", kRuncList + "c 195:0 rw\n");
  node.cgroup(kUid1, "cri-containerd-" + kSandboxId + ".scope", kRuncList);
  node.cgroup(kUid1, "docker-" + kDockerId + ".scope", kRuncList);
  node.containerd_bundle(kContainerdId, kUid1, "ml", "p", "trainer");
  node.containerd_bundle(kSandboxId, kUid1, "ml", "p", "", "sandbox");
  node.checkpoint({entry(kUid1, "trainer", "nvidia.com/gpu", {kGpu0})});
  auto r = run_command({GDW_BINARY, "check", "--json", "--config", node.config()});
  EXPECT_EQ(r.exit_code, 1) << r.out << r.err;
  auto doc = json::parse(r.out);
  ASSERT_EQ(doc["containers"].size(), 1u) << "the sandbox is not a container to check";
  ASSERT_EQ(doc["unidentified"].size(), 1u);
  EXPECT_EQ(doc["unidentified"][0]["container_id"], kDockerId);
  EXPECT_NE(doc["unidentified"][0]["reason"].get<std::string>().find("no OCI bundle"), std::string::npos);
}

TEST(CheckFixture, ContainersWithoutAllocationsAreNotListed) {
  FixtureNode node;
  node.cgroup(kUid2, "crio-" + kCrioId + ".scope", kRuncList);
  node.crio_bundle(kCrioId, kUid2, "web", "nginx", "nginx");
  node.checkpoint({});
  auto r = run_command({GDW_BINARY, "check", "--json", "--config", node.config()});
  EXPECT_EQ(r.exit_code, 0) << r.out << r.err;
  auto doc = json::parse(r.out);
  EXPECT_TRUE(doc["containers"].empty());
  EXPECT_EQ(doc["untouched_containers"], 1);
}

TEST(CheckFixture, InvalidChecksumIsReportedAndThePolicyApplied) {
  FixtureNode node;
  node.cgroup(kUid1, "crio-" + kCrioId + ".scope", kRuncList);
  node.crio_bundle(kCrioId, kUid1, "ml", "p", "trainer");
  node.checkpoint({entry(kUid1, "trainer", "nvidia.com/gpu", {kGpu0})});
  // Hand-edit the checksum.
  std::string text = read_file(node.dir() / "kubelet/kubelet_internal_checkpoint");
  auto pos = text.find("\"Checksum\":");
  text.replace(pos, text.find('}', pos) - pos, "\"Checksum\":12345");
  write_file(node.dir() / "kubelet/kubelet_internal_checkpoint", text);

  auto used = run_command({GDW_BINARY, "check", "--config", node.config()});
  EXPECT_EQ(used.exit_code, 1) << used.out << used.err;
  EXPECT_NE(used.out.find("checksum INVALID"), std::string::npos) << used.out;
  EXPECT_NE(used.out.find("ml/p/trainer"), std::string::npos) << "entries still used by default";

  auto ignored = run_command({GDW_BINARY, "check", "--json", "--config",
                              node.config("", "  on_invalid_checksum: ignore\n")});
  EXPECT_EQ(ignored.exit_code, 0) << ignored.out << ignored.err;
  auto doc = json::parse(ignored.out);
  EXPECT_FALSE(doc["checkpoint"]["checksum_valid"].get<bool>());
  EXPECT_FALSE(doc["checkpoint"]["entries_used"].get<bool>());
  EXPECT_TRUE(doc["containers"].empty());
}

TEST(CheckFixture, ErrorsExitTwoWithAClearMessage) {
  FixtureNode node;
  node.checkpoint({});
  // Unknown key with its line.
  auto bad = run_command({GDW_BINARY, "check", "--config", node.dir().write("bad.yaml", "mode: enforce\nmod: x\n")});
  EXPECT_EQ(bad.exit_code, 2);
  EXPECT_NE(bad.err.find("bad.yaml:2: unknown key 'mod'"), std::string::npos) << bad.err;
  // A config file that does not exist.
  auto missing = run_command({GDW_BINARY, "check", "--config", node.dir() / "nope.yaml"});
  EXPECT_EQ(missing.exit_code, 2);
  EXPECT_NE(missing.err.find("nope.yaml"), std::string::npos) << missing.err;
  // No devices hierarchy, then no kubepods under it.
  auto no_hierarchy = run_command({GDW_BINARY, "check", "--config", node.config()});
  EXPECT_EQ(no_hierarchy.exit_code, 2);
  EXPECT_NE(no_hierarchy.err.find("no cgroup v1 devices hierarchy or cgroup2 mount"), std::string::npos) << no_hierarchy.err;
  node.dir().mkdirs("cgroup/devices");
  auto no_pods = run_command({GDW_BINARY, "check", "--config", node.config()});
  EXPECT_EQ(no_pods.exit_code, 2);
  EXPECT_NE(no_pods.err.find("kubepods"), std::string::npos) << no_pods.err;
  // An unreadable checkpoint.
  node.cgroup(kUid1, "crio-" + kCrioId + ".scope", kRuncList);
  write_file(node.dir() / "kubelet/kubelet_internal_checkpoint", "{\"Data\": ");
  auto corrupt = run_command({GDW_BINARY, "check", "--config", node.config()});
  EXPECT_EQ(corrupt.exit_code, 2);
  EXPECT_NE(corrupt.err.find("kubelet checkpoint"), std::string::npos) << corrupt.err;
}

TEST(CheckFixture, NodeHealthVerdicts) {
  FixtureNode node;
  warm_up_grpc_client();
  node.cgroup(kUid1, "crio-" + kCrioId + ".scope",
              kRuncList + "c 195:0 rw\nc 195:1 rw\nc 195:255 rw\nc 239:0 rw\nc 239:1 rw\n");
  node.crio_bundle(kCrioId, kUid1, "ml", "p", "trainer");
  node.checkpoint({entry(kUid1, "trainer", "nvidia.com/gpu", {kGpu0})});
  const std::string plugins = node.dir().mkdirs("plugins");
  const std::string kubelet_extra = "  device_plugins_dir: " + plugins + "\n  pod_resources_socket: " +
                                    node.dir() / "podres.sock" + "\n  plugin_probe_timeout: 300ms\n" +
                                    "  pod_resources_timeout: 300ms\n";
  {
    FakeDevicePlugin good(plugins + "/nvidia-gpu.sock");
    // kubelet's live view gives the container the other GPU: a disagreement (PodResources wins).
    FakePodResources kubelet(node.dir() / "podres.sock");
    kubelet.set_response(one_container_listing("ml", "p", "trainer", "GPU-8a1e6b55-0d1c-4f4e-9b3e-3c0d5a2f7e41"));
    auto healthy = run_command({GDW_BINARY, "check", "--config", node.config("", kubelet_extra)});
    EXPECT_EQ(healthy.exit_code, 0) << healthy.out << healthy.err;
    EXPECT_NE(healthy.out.find("device plugin nvidia-gpu.sock: answers"), std::string::npos) << healthy.out;
    EXPECT_NE(healthy.out.find("checkpoint freshness: ok"), std::string::npos) << healthy.out;
    EXPECT_NE(healthy.out.find("disagreement:"), std::string::npos) << "reported, exit code unchanged\n" << healthy.out;
  }
  {
    SilentSocket hung(plugins + "/hung.sock");
    auto r = run_command({GDW_BINARY, "check", "--json", "--config", node.config("", kubelet_extra)});
    EXPECT_EQ(r.exit_code, 1) << r.out << r.err;
    auto doc = json::parse(r.out);
    ASSERT_EQ(doc["device_plugins"].size(), 1u) << r.out;
    EXPECT_FALSE(doc["device_plugins"][0]["up"].get<bool>());
    EXPECT_EQ(doc["pod_resources"]["ok"], false) << "no PodResources server now";
  }
  // A checkpoint naming a GPU this host does not have: stale.
  node.checkpoint({entry(kUid1, "trainer", "nvidia.com/gpu", {kGpu0}),
                   entry(kUid2, "gone", "nvidia.com/gpu", {"GPU-00000000-1111-4222-8333-444444444444"})});
  auto stale = run_command({GDW_BINARY, "check", "--config", node.config("", kubelet_extra)});
  EXPECT_EQ(stale.exit_code, 1) << stale.out << stale.err;
  EXPECT_NE(stale.out.find("checkpoint freshness: STALE"), std::string::npos) << stale.out;
  EXPECT_NE(stale.out.find("GPU-00000000-1111-4222-8333-444444444444"), std::string::npos) << stale.out;
}

TEST(Cli, EveryCommandHasHelpAndRejectsUnknownOptions) {
  for (const char* cmd : {"check", "run", "version"}) {
    auto r = run_command({GDW_BINARY, cmd, "--help"});
    EXPECT_EQ(r.exit_code, 0) << cmd;
    EXPECT_NE(r.out.find(std::string("usage: gpu-devwatch ") + cmd), std::string::npos) << r.out;
  }
  auto top = run_command({GDW_BINARY, "--help"});
  EXPECT_EQ(top.exit_code, 0);
  EXPECT_NE(top.out.find("check"), std::string::npos);
  EXPECT_EQ(run_command({GDW_BINARY, "check", "--bogus"}).exit_code, 2);
  EXPECT_EQ(run_command({GDW_BINARY, "run", "--bogus"}).exit_code, 2);
  EXPECT_EQ(run_command({GDW_BINARY, "frobnicate"}).exit_code, 2);
  auto v = run_command({GDW_BINARY, "version"});
  EXPECT_EQ(v.exit_code, 0);
  EXPECT_EQ(v.out.rfind("gpu-devwatch ", 0), 0u);
}

}  // namespace
}  // namespace gdw::test
