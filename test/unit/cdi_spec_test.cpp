// CDI spec files: the parser (JSON and YAML, versions, device and spec-level edits, node
// types, bad input named precisely), the registry (later files win, a bad file leaves the
// others in force), and the reader on a real directory tree.
#include "cdi/cdi_spec.h"

#include <gtest/gtest.h>

#include "core/desired_state.h"
#include "support/temp_dir.h"

namespace gdw {
namespace {

constexpr const char* kNvidiaYaml = R"(---
cdiVersion: 0.5.0
kind: nvidia.com/gpu
devices:
- name: "0"
  containerEdits:
    deviceNodes:
    - path: /dev/nvidia0
- name: GPU-0650a168-e770-3ea8-8ac3-8a1d41970000
  containerEdits:
    deviceNodes:
    - path: /dev/nvidia0
      hostPath: /dev/nvidia0
      permissions: rw
- name: all
  containerEdits:
    deviceNodes:
    - path: /dev/nvidia0
    - path: /dev/nvidia1
containerEdits:
  env:
  - NVIDIA_VISIBLE_DEVICES=void
  deviceNodes:
  - path: /dev/nvidiactl
  - path: /dev/nvidia-uvm
    type: c
    major: 237
    minor: 0
  hooks:
  - hookName: createContainer
    path: /usr/bin/nvidia-cdi-hook
)";

constexpr const char* kClaimJson = R"({
  "cdiVersion": "0.8.0",
  "kind": "k8s.gpu.nvidia.com/claim",
  "devices": [
    {"name": "3c8337ad-f366-4541-883d-30b9e99fd6be-gpu-1",
     "containerEdits": {"deviceNodes": [{"path": "/dev/nvidia1", "type": "c", "major": 195, "minor": 1}]}}
  ]
})";

TEST(CdiSpec, YamlWithDeviceAndSpecLevelNodes) {
  auto spec = parse_cdi_spec(kNvidiaYaml, CdiFormat::kYaml);
  ASSERT_TRUE(spec.ok()) << spec.error().message;
  EXPECT_EQ(spec->version, "0.5.0");
  EXPECT_EQ(spec->kind, "nvidia.com/gpu");
  ASSERT_EQ(spec->devices.size(), 3u);
  ASSERT_EQ(spec->devices.at("0").size(), 1u);
  EXPECT_EQ(spec->devices.at("0")[0].host_path, "/dev/nvidia0");
  EXPECT_FALSE(spec->devices.at("0")[0].number.has_value());  // stat() decides
  EXPECT_EQ(spec->devices.at("GPU-0650a168-e770-3ea8-8ac3-8a1d41970000")[0].permissions, "rw");
  ASSERT_EQ(spec->spec_nodes.size(), 2u);
  EXPECT_EQ(spec->spec_nodes[0].host_path, "/dev/nvidiactl");
  ASSERT_TRUE(spec->spec_nodes[1].number.has_value());
  EXPECT_EQ(*spec->spec_nodes[1].number, (DeviceNumber{DeviceType::kChar, 237, 0}));
}

TEST(CdiSpec, JsonWithNumbers) {
  auto spec = parse_cdi_spec(kClaimJson, CdiFormat::kJson);
  ASSERT_TRUE(spec.ok()) << spec.error().message;
  const auto& nodes = spec->devices.at("3c8337ad-f366-4541-883d-30b9e99fd6be-gpu-1");
  ASSERT_EQ(nodes.size(), 1u);
  EXPECT_EQ(*nodes[0].number, (DeviceNumber{DeviceType::kChar, 195, 1}));
  EXPECT_TRUE(spec->spec_nodes.empty());
}

TEST(CdiSpec, HostPathDefaultsToPathAndDiffersWhenGiven) {
  auto spec = parse_cdi_spec(R"({"cdiVersion":"0.6.0","kind":"amd.com/gpu","devices":[{"name":"gpu0",
      "containerEdits":{"deviceNodes":[{"path":"/dev/dri/renderD128","hostPath":"/dev/dri/renderD130"},
                                       {"path":"/dev/kfd"}]}}]})",
                             CdiFormat::kJson);
  ASSERT_TRUE(spec.ok()) << spec.error().message;
  EXPECT_EQ(spec->devices.at("gpu0")[0].host_path, "/dev/dri/renderD130");
  EXPECT_EQ(spec->devices.at("gpu0")[1].host_path, "/dev/kfd");
}

TEST(CdiSpec, EveryVersionFrom03To08AndNoOther) {
  for (const char* v : {"0.3.0", "0.4.0", "0.5.0", "0.6.0", "0.7.0", "0.8.0"}) {
    auto spec = parse_cdi_spec(std::string("cdiVersion: ") + v + "\nkind: a.com/b\ndevices: []\n", CdiFormat::kYaml);
    EXPECT_TRUE(spec.ok()) << v << ": " << spec.error().message;
  }
  for (const char* v : {"0.2.0", "0.9.0", "1.0.0", "0.5", "latest", ""}) {
    auto spec = parse_cdi_spec(std::string("cdiVersion: \"") + v + "\"\nkind: a.com/b\ndevices: []\n", CdiFormat::kYaml);
    ASSERT_FALSE(spec.ok()) << v;
    EXPECT_NE(spec.error().message.find("is not supported (0.3.0 to 0.8.0)"), std::string::npos)
        << spec.error().message;
  }
  auto missing = parse_cdi_spec("kind: a.com/b\ndevices: []\n", CdiFormat::kYaml);
  ASSERT_FALSE(missing.ok());
  EXPECT_EQ(missing.error().message, "cdiVersion: missing");
}

TEST(CdiSpec, OnlyCharacterDevicesAreKept) {
  auto spec = parse_cdi_spec(R"(cdiVersion: 0.7.0
kind: example.com/dev
devices:
- name: d
  containerEdits:
    deviceNodes:
    - {path: /dev/sda, type: b, major: 8, minor: 0}
    - {path: /dev/fifo, type: p}
    - {path: /dev/ttyX, type: u, major: 4, minor: 64}
)",
                             CdiFormat::kYaml);
  ASSERT_TRUE(spec.ok()) << spec.error().message;
  ASSERT_EQ(spec->devices.at("d").size(), 1u);
  EXPECT_EQ(*spec->devices.at("d")[0].number, (DeviceNumber{DeviceType::kChar, 4, 64}));
  EXPECT_EQ(spec->skipped, (std::vector<std::string>{"d: /dev/sda (type b)", "d: /dev/fifo (type p)"}));
}

TEST(CdiSpec, BadInputSaysWhatAndWhere) {
  struct Case {
    std::string text;
    CdiFormat format;
    std::string expect;
  } cases[] = {
      {"{", CdiFormat::kJson, "not valid JSON"},
      {"a: [b", CdiFormat::kYaml, "invalid YAML"},
      {"- 1\n- 2\n", CdiFormat::kYaml, "expected a mapping at the top"},
      {"cdiVersion: 0.5.0\nkind: nvidia.com\ndevices: []\n", CdiFormat::kYaml, "kind: expected vendor.com/class"},
      {"cdiVersion: 0.5.0\nkind: a.com/b\n", CdiFormat::kYaml, "devices: expected a list"},
      {"cdiVersion: 0.5.0\nkind: a.com/b\ndevices: [{name: 'x y'}]\n", CdiFormat::kYaml, "devices[0].name"},
      {"cdiVersion: 0.5.0\nkind: a.com/b\ndevices: [{name: x}, {name: x}]\n", CdiFormat::kYaml, "defined twice"},
      {"cdiVersion: 0.5.0\nkind: a.com/b\ndevices: [{name: x, containerEdits: {deviceNodes: [{path: dev/x}]}}]\n",
       CdiFormat::kYaml, "devices[0].containerEdits.deviceNodes[0].path: expected an absolute path"},
      {"cdiVersion: 0.5.0\nkind: a.com/b\ndevices: [{name: x, containerEdits: {deviceNodes: [{path: /dev/x, major: -1}]}}]\n",
       CdiFormat::kYaml, "deviceNodes[0].major: expected a non-negative integer"},
      {R"({"cdiVersion":"0.5.0","kind":"a.com/b","devices":[{"name":"x","containerEdits":{"deviceNodes":[{"path":"/dev/x","major":1.5}]}}]})",
       CdiFormat::kJson, "major: expected a non-negative integer"},
      {"cdiVersion: 0.5.0\nkind: a.com/b\ndevices: [{name: x, containerEdits: {deviceNodes: [{path: /dev/x, major: 5000}]}}]\n",
       CdiFormat::kYaml, "major: 5000 is above 4095"},
      {"cdiVersion: 0.5.0\nkind: a.com/b\ndevices: [{name: x, containerEdits: {deviceNodes: [{path: /dev/x, type: z}]}}]\n",
       CdiFormat::kYaml, "type: expected c, u, b or p"},
      {"cdiVersion: 0.5.0\nkind: a.com/b\ndevices: [{name: x, containerEdits: {deviceNodes: [{path: /dev/x, permissions: rwx}]}}]\n",
       CdiFormat::kYaml, "permissions: expected letters of rwm"},
      {"cdiVersion: 0.5.0\nkind: a.com/b\ndevices: []\ncontainerEdits: {deviceNodes: {path: /dev/x}}\n", CdiFormat::kYaml,
       "containerEdits.deviceNodes: expected a list"},
      {std::string(200, '[') + std::string(200, ']'), CdiFormat::kYaml, "nested deeper than 64 levels"},
  };
  for (const auto& c : cases) {
    auto spec = parse_cdi_spec(c.text, c.format);
    ASSERT_FALSE(spec.ok()) << c.text;
    EXPECT_NE(spec.error().message.find(c.expect), std::string::npos)
        << c.text << "\n got: " << spec.error().message << "\n expected: " << c.expect;
  }
}

TEST(CdiRegistry, QualifiedNamesCarryTheSpecLevelNodesAndLaterFilesWin) {
  const std::string claim_v2 = R"({"cdiVersion":"0.8.0","kind":"k8s.gpu.nvidia.com/claim","devices":[
      {"name":"3c8337ad-f366-4541-883d-30b9e99fd6be-gpu-1","containerEdits":{"deviceNodes":[{"path":"/dev/nvidia0"}]}}]})";
  CdiRegistry r = build_cdi_registry({{"/etc/cdi/nvidia.yaml", kNvidiaYaml},
                                      {"/etc/cdi/claim.json", kClaimJson},
                                      {"/var/run/cdi/broken.yaml", "cdiVersion: 0.1.0\nkind: a.com/b\ndevices: []\n"},
                                      {"/var/run/cdi/claim.json", claim_v2}});
  EXPECT_EQ(r.spec_files, 3u);
  ASSERT_EQ(r.errors.size(), 1u);
  EXPECT_EQ(r.errors[0].rfind("/var/run/cdi/broken.yaml: cdiVersion '0.1.0' is not supported", 0), 0u) << r.errors[0];
  // nvidia.com/gpu=0: its node, then the spec's two.
  const auto& gpu0 = r.devices.at("nvidia.com/gpu=0");
  ASSERT_EQ(gpu0.size(), 3u);
  EXPECT_EQ(gpu0[0].host_path, "/dev/nvidia0");
  EXPECT_EQ(gpu0[1].host_path, "/dev/nvidiactl");
  EXPECT_EQ(gpu0[2].host_path, "/dev/nvidia-uvm");
  // The claim device from the later directory replaced the earlier one.
  const std::string claim = "k8s.gpu.nvidia.com/claim=3c8337ad-f366-4541-883d-30b9e99fd6be-gpu-1";
  ASSERT_EQ(r.devices.at(claim).size(), 1u);
  EXPECT_EQ(r.devices.at(claim)[0].host_path, "/dev/nvidia0");
  EXPECT_EQ(r.defined_in.at(claim), "/var/run/cdi/claim.json");
  EXPECT_FALSE(r.devices.count("nvidia.com/gpu=1"));
}

TEST(CdiRegistry, FileNamesAndFormats) {
  EXPECT_TRUE(is_cdi_spec_file_name("nvidia.yaml"));
  EXPECT_TRUE(is_cdi_spec_file_name("k8s.gpu.nvidia.com-claim_1.json"));
  EXPECT_TRUE(is_cdi_spec_file_name("x.yml"));
  EXPECT_FALSE(is_cdi_spec_file_name(".nvidia.yaml.tmp"));
  EXPECT_FALSE(is_cdi_spec_file_name(".nvidia.yaml"));
  EXPECT_FALSE(is_cdi_spec_file_name("nvidia.yaml.bak"));
  EXPECT_FALSE(is_cdi_spec_file_name(".yaml"));
  EXPECT_EQ(cdi_format_of("/etc/cdi/a.json"), CdiFormat::kJson);
  EXPECT_EQ(cdi_format_of("/etc/cdi/a.yaml"), CdiFormat::kYaml);
}

TEST(CdiReader, ReadsDirectoriesInOrderAndSkipsWhatIsNoSpec) {
  test::TempDir root("gdw-cdi");
  root.write("etc/cdi/nvidia.yaml", kNvidiaYaml);
  root.write("etc/cdi/.nvidia.yaml.tmp", "garbage");
  root.write("etc/cdi/README", "not a spec");
  root.write("run/cdi/nvidia.json",
             R"({"cdiVersion":"0.5.0","kind":"nvidia.com/gpu","devices":[{"name":"0","containerEdits":{"deviceNodes":[{"path":"/dev/nvidia7"}]}}]})");
  root.write("run/cdi/bad.yaml", "cdiVersion: [");
  CdiRegistry r = load_cdi_registry({root.path() + "/etc/cdi", root.path() + "/run/cdi", root.path() + "/absent"});
  EXPECT_EQ(r.spec_files, 2u);
  ASSERT_EQ(r.errors.size(), 1u);
  EXPECT_NE(r.errors[0].find(root.path() + "/run/cdi/bad.yaml: "), std::string::npos) << r.errors[0];
  // The later directory's nvidia.com/gpu=0 (no spec-level nodes there).
  ASSERT_EQ(r.devices.at("nvidia.com/gpu=0").size(), 1u);
  EXPECT_EQ(r.devices.at("nvidia.com/gpu=0")[0].host_path, "/dev/nvidia7");
  // The earlier directory's other devices still apply.
  EXPECT_EQ(r.devices.at("nvidia.com/gpu=all").size(), 4u);
}

// compute_desired() with CDI names: a device plugin's AllocResp and a DRA claim.
Inventory cdi_inventory() {
  Inventory inv;
  inv.char_majors = {{"nvidia", 195}, {"nvidia-uvm", 237}};
  inv.gpus.push_back({"GPU-a", 0, "", "", false});
  inv.dev_nodes = {{"nvidia0", {DeviceType::kChar, 195, 0}},
                   {"nvidia1", {DeviceType::kChar, 195, 1}},
                   {"nvidiactl", {DeviceType::kChar, 195, 255}},
                   {"nvidia-uvm", {DeviceType::kChar, 237, 0}},
                   {"dri/renderD128", {DeviceType::kChar, 226, 128}}};
  CdiRegistry r = build_cdi_registry({{"/etc/cdi/nvidia.yaml", kNvidiaYaml}, {"/var/run/cdi/claim.json", kClaimJson}});
  inv.cdi_devices = r.devices;
  inv.cdi_devices["amd.com/gpu=0"] = {{"/dev/dri/renderD128", std::nullopt, ""}, {"/dev/kfd", std::nullopt, ""}};
  return inv;
}

const DesiredPolicy kPolicy{{"nvidia.com/gpu"}, {"nvidiactl", "nvidia-uvm"}, EnvVisiblePolicy::kReport,
                            {"gpu.nvidia.com", "gpu.amd.com"}};

std::vector<std::string> names_of(const DesiredDevices& d) {
  std::vector<std::string> out;
  for (const auto& w : d.wanted) out.push_back(w.name);
  return out;
}

TEST(CdiDesired, DraClaimGetsExactlyItsCdiNodesAndNoControlNodes) {
  AllocationEntry claim;
  claim.pod_uid = "u";
  claim.container_name = "c";
  claim.resource = "gpu.nvidia.com";
  claim.dra_claim = "ml/claim-0";
  claim.cdi_devices = {"k8s.gpu.nvidia.com/claim=3c8337ad-f366-4541-883d-30b9e99fd6be-gpu-1"};
  DesiredDevices d = compute_desired({claim}, cdi_inventory(), kPolicy);
  EXPECT_TRUE(d.holds_gpu);
  EXPECT_EQ(names_of(d), (std::vector<std::string>{"nvidia1"}));
  EXPECT_TRUE(d.unresolved.empty());

  // An AMD claim: its render node; /dev/kfd does not exist here: unresolved, not guessed.
  claim.resource = "gpu.amd.com";
  claim.cdi_devices = {"amd.com/gpu=0"};
  d = compute_desired({claim}, cdi_inventory(), kPolicy);
  EXPECT_EQ(names_of(d), (std::vector<std::string>{"dri/renderD128"}));
  ASSERT_EQ(d.unresolved.size(), 1u);
  EXPECT_NE(d.unresolved[0].find("/dev/kfd is no character device"), std::string::npos);

  // A driver outside devices.dra_drivers: nothing.
  claim.resource = "nic.example.com";
  d = compute_desired({claim}, cdi_inventory(), kPolicy);
  EXPECT_FALSE(d.holds_gpu);
  EXPECT_TRUE(d.wanted.empty());
}

TEST(CdiDesired, AllocRespCdiNamesAddTheirNodesToTheDevicePluginsGrant) {
  AllocationEntry e;
  e.resource = "nvidia.com/gpu";
  e.device_ids = {"GPU-a"};
  e.cdi_devices = {"nvidia.com/gpu=0", "nvidia.com/gpu=9"};
  DesiredDevices d = compute_desired({e}, cdi_inventory(), kPolicy);
  EXPECT_EQ(names_of(d), (std::vector<std::string>{"nvidia0", "nvidiactl", "nvidia-uvm"}));
  EXPECT_EQ(d.unresolved_cdi, (std::vector<std::string>{"nvidia.com/gpu=9"}));
  ASSERT_EQ(d.unresolved.size(), 1u);
  EXPECT_NE(d.unresolved[0].find("CDI device nvidia.com/gpu=9"), std::string::npos);
  EXPECT_NE(d.unresolved[0].find("no CDI spec in cdi.spec_dirs defines it"), std::string::npos);
}

TEST(CdiDesired, CdiAnnotationsOfTheAllocRespAreResolvedToo) {
  // deviceListStrategy cdi-annotations: the plugin's reply carries the names in annotations.
  AllocationEntry e;
  e.resource = "nvidia.com/gpu";
  e.device_ids = {"GPU-a"};
  e.annotations = {{"cdi.k8s.io/nvidia-device-plugin_uuid", "nvidia.com/gpu=0,k8s.gpu.nvidia.com/claim=3c8337ad-f366-4541-883d-30b9e99fd6be-gpu-1"},
                   {"example.com/other", "nvidia.com/gpu=all"}};
  DesiredDevices d = compute_desired({e}, cdi_inventory(), kPolicy);
  EXPECT_EQ(names_of(d), (std::vector<std::string>{"nvidia0", "nvidia1", "nvidiactl", "nvidia-uvm"}));
  EXPECT_TRUE(d.unresolved.empty());
}

}  // namespace
}  // namespace gdw
