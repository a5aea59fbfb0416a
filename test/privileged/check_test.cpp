// `gpu-devwatch check` on the real kernel: a sandbox node with real v1 device cgroups,
// containers rewritten the way runtimes do, access proven by open() from inside.
#include <gtest/gtest.h>

#include <cerrno>
#include <nlohmann/json.hpp>

#include "support/process.h"
#include "support/sandbox_node.h"

namespace gdw::test {
namespace {

class CheckOnRealCgroups : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!SandboxNode::available()) GTEST_SKIP() << "needs root and a writable cgroup v1 devices hierarchy";
  }
  CommandResult check(const std::string& config, std::vector<std::string> extra = {}) {
    std::vector<std::string> argv = {GDW_BINARY, "check", "--config", config};
    argv.insert(argv.end(), extra.begin(), extra.end());
    return run_command(argv);
  }
};

TEST_F(CheckOnRealCgroups, FindsRevokedDevicesAndRepairsExactlyThem) {
  SandboxNode node;
  const auto& revoked = node.add_container({.pod_namespace = "ml", .pod_name = "trainer-0",
                                            .container_name = "trainer", .device_ids = {node.gpu_uuid(0)}});
  const auto& seed001 = node.add_container({.pod_namespace = "ml", .pod_name = "infer-0", .container_name = "server",
                                            .qos = QosClass::kGuaranteed, .device_ids = {node.gpu_uuid(1)},
                                            .hook_grants_uvm = false});
  const auto& plain = node.add_container({.pod_namespace = "web", .pod_name = "nginx-0", .container_name = "nginx",
                                          .qos = QosClass::kBestEffort});
  node.write_checkpoint();
  const std::string config = node.write_config();

  // Working until the runtime re-applies the spec: deny `a`, then only the spec's allows.
  EXPECT_EQ(node.open_errno(revoked, "nvidia0"), ENXIO);
  node.reapply_spec(revoked);
  node.reapply_spec(plain);
  const std::string plain_before = node.cgroups().devices_list(plain.cgroup_rel);
  EXPECT_EQ(node.open_errno(revoked, "nvidia0"), EPERM);
  EXPECT_EQ(node.open_errno(revoked, "nvidia-uvm"), EPERM);
  EXPECT_EQ(node.open_errno(seed001, "nvidia1"), ENXIO);
  EXPECT_EQ(node.open_errno(seed001, "nvidia-uvm"), EPERM);

  auto before = check(config);
  EXPECT_EQ(before.exit_code, 1) << before.out << before.err;
  EXPECT_NE(before.out.find("ml/trainer-0/trainer"), std::string::npos) << before.out;
  EXPECT_NE(before.out.find("missing"), std::string::npos) << before.out;
  EXPECT_EQ(before.out.find("web/nginx-0"), std::string::npos) << "containers without GPUs are not listed\n"
                                                               << before.out;

  auto json_out = check(config, {"--json"});
  ASSERT_EQ(json_out.exit_code, 1) << json_out.err;
  auto doc = nlohmann::json::parse(json_out.out);
  std::map<std::string, std::vector<std::string>> missing;
  for (const auto& c : doc["containers"])
    for (const auto& m : c["missing"]) missing[c["container"]].push_back(m["device"]);
  EXPECT_EQ(missing["trainer"], (std::vector<std::string>{"nvidia0", "nvidiactl", "nvidia-uvm", "nvidia-uvm-tools"}));
  EXPECT_EQ(missing["server"], (std::vector<std::string>{"nvidia-uvm", "nvidia-uvm-tools"}));
  EXPECT_TRUE(doc["checkpoint"]["checksum_valid"].get<bool>());
  EXPECT_EQ(doc["untouched_containers"], 1);

  auto repair = check(config, {"--repair"});
  EXPECT_EQ(repair.exit_code, 0) << repair.out << repair.err;
  EXPECT_NE(repair.out.find("granted nvidia0"), std::string::npos) << repair.out;

  // Access proven from inside: allowed now, where it was denied before.
  EXPECT_EQ(node.open_errno(revoked, "nvidia0"), ENXIO);
  EXPECT_EQ(node.open_errno(revoked, "nvidiactl"), ENXIO);
  EXPECT_EQ(node.open_errno(revoked, "nvidia-uvm"), ENXIO);
  EXPECT_EQ(node.open_errno(seed001, "nvidia-uvm"), ENXIO);
  // Nothing beyond the allocation: the other GPU stays denied.
  EXPECT_EQ(node.open_errno(revoked, "nvidia1"), EPERM);
  EXPECT_EQ(node.open_errno(seed001, "nvidia0"), EPERM);
  // The container without GPUs is untouched.
  EXPECT_EQ(node.cgroups().devices_list(plain.cgroup_rel), plain_before);
  EXPECT_EQ(node.open_errno(plain, "nvidia0"), EPERM);

  auto after = check(config);
  EXPECT_EQ(after.exit_code, 0) << after.out << after.err;
}

TEST_F(CheckOnRealCgroups, ObserveModeRefusesToRepair) {
  SandboxNode node;
  const auto& c = node.add_container({.pod_name = "p", .container_name = "c", .device_ids = {node.gpu_uuid(0)}});
  node.write_checkpoint();
  node.reapply_spec(c);
  const std::string before = node.cgroups().devices_list(c.cgroup_rel);
  auto r = run_command({GDW_BINARY, "check", "--repair", "--config", node.write_config("mode: observe\n")});
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.err.find("observe"), std::string::npos) << r.err;
  EXPECT_EQ(node.cgroups().devices_list(c.cgroup_rel), before);
  EXPECT_EQ(node.open_errno(c, "nvidia0"), EPERM);
}

TEST_F(CheckOnRealCgroups, SystemdNamingIsFoundToo) {
  SandboxNode node(SandboxNode::Options{.systemd_naming = true});
  const auto& c = node.add_container({.pod_namespace = "ml", .pod_name = "p", .container_name = "c",
                                      .device_ids = {node.gpu_uuid(1)}});
  node.write_checkpoint();
  node.reapply_spec(c);
  const std::string config = node.write_config();
  auto r = run_command({GDW_BINARY, "check", "--repair", "--config", config});
  EXPECT_EQ(r.exit_code, 0) << r.out << r.err;
  EXPECT_EQ(node.open_errno(c, "nvidia1"), ENXIO);
}

TEST_F(CheckOnRealCgroups, ContainerWithoutBundleInAGpuPodIsReportedNotGuessed) {
  SandboxNode node;
  const auto& gpu = node.add_container({.pod_name = "p", .container_name = "c", .device_ids = {node.gpu_uuid(0)}});
  const auto& orphan = node.add_container({.pod_name = "p", .container_name = "sidecar", .with_bundle = false,
                                           .pod_uid = gpu.spec.pod_uid});
  node.write_checkpoint();
  node.reapply_spec(orphan);
  const std::string orphan_before = node.cgroups().devices_list(orphan.cgroup_rel);
  auto r = run_command({GDW_BINARY, "check", "--repair", "--config", node.write_config()});
  EXPECT_EQ(r.exit_code, 1) << r.out;
  EXPECT_NE(r.out.find("no OCI bundle"), std::string::npos) << r.out;
  EXPECT_EQ(node.cgroups().devices_list(orphan.cgroup_rel), orphan_before);
}

TEST_F(CheckOnRealCgroups, AKernelRefusalIsReportedPerDevice) {
  SandboxNode node;
  const auto& c = node.add_container({.pod_name = "p", .container_name = "c", .device_ids = {node.gpu_uuid(0)}});
  node.write_checkpoint();
  // The pod cgroup denies the GPU: the container cannot be granted more than its parent.
  const std::string pod_rel = c.cgroup_rel.substr(0, c.cgroup_rel.rfind('/'));
  ASSERT_EQ(node.cgroups().deny(pod_rel, "c 195:0 rwm"), 0);
  auto r = run_command({GDW_BINARY, "check", "--repair", "--config", node.write_config()});
  EXPECT_EQ(r.exit_code, 1) << r.out;
  EXPECT_NE(r.out.find("could not grant nvidia0"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("refused by the kernel"), std::string::npos) << r.out;
  EXPECT_EQ(node.open_errno(c, "nvidia0"), EPERM);
}

}  // namespace
}  // namespace gdw::test
