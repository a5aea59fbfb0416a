#include "core/desired_state.h"

#include <gtest/gtest.h>

namespace gdw {
namespace {

constexpr const char* kGpu0 = "GPU-0650a168-e770-3ea8-8ac3-8a1d419763e0";
constexpr const char* kGpu1 = "GPU-a1b2c3d4-e5f6-4711-8899-aabbccddeeff";
constexpr const char* kMig = "MIG-11112222-3333-4444-5555-666677778888";

Inventory host() {
  Inventory inv;
  inv.char_majors = {{"nvidia", 195}, {"nvidiactl", 195}, {"nvidia-uvm", 237}, {"nvidia-caps", 240}};
  inv.gpus = {{kGpu0, 0, "0000:0f:00.0", "NVIDIA H20", false}, {kGpu1, 1, "0000:10:00.0", "NVIDIA H20", false}};
  inv.mig_minors = {{"config", 1}, {"monitor", 2}, {"gpu1/gi2/access", 21}, {"gpu1/gi2/ci0/access", 22}};
  inv.migs = {{kMig, 1, 2, 0}};
  inv.dev_nodes = {{"nvidia0", {DeviceType::kChar, 195, 0}},
                   {"nvidia1", {DeviceType::kChar, 195, 1}},
                   {"nvidiactl", {DeviceType::kChar, 195, 255}},
                   {"nvidia-uvm", {DeviceType::kChar, 237, 0}}};
  return inv;
}

const DesiredPolicy kPolicy{{"nvidia.com/gpu", "nvidia.com/mig-*"},
                            {"nvidiactl", "nvidia-uvm", "nvidia-uvm-tools", "nvidia-modeset"}};

AllocationEntry entry(std::string resource, std::vector<std::string> ids) {
  AllocationEntry e;
  e.pod_uid = "uid";
  e.container_name = "c";
  e.resource = std::move(resource);
  e.device_ids = std::move(ids);
  return e;
}

std::vector<std::string> names(const std::vector<WantedDevice>& w) {
  std::vector<std::string> out;
  for (const auto& d : w) out.push_back(d.name + "=" + format_device_number(d.dev));
  return out;
}

TEST(Desired, FullGpuGetsItsNodeAndTheControlNodesThatExist) {
  auto d = compute_desired({entry("nvidia.com/gpu", {kGpu1})}, host(), kPolicy);
  EXPECT_TRUE(d.holds_gpu);
  EXPECT_TRUE(d.unresolved.empty());
  // nvidia-uvm-tools has no node but its driver is registered (minor 1 of nvidia-uvm);
  // nvidia-modeset has neither a node nor a /proc/devices entry of its own: not on this host.
  EXPECT_EQ(names(d.wanted), (std::vector<std::string>{"nvidia1=195:1", "nvidiactl=195:255", "nvidia-uvm=237:0",
                                                       "nvidia-uvm-tools=237:1"}));
  for (const auto& w : d.wanted) EXPECT_EQ(w.access, kAccessReadWrite) << w.name;
}

TEST(Desired, ControlNodesOfAnUnloadedDriverAreNotWanted) {
  Inventory inv = host();
  inv.char_majors.erase("nvidia-uvm");
  inv.dev_nodes.erase("nvidia-uvm");
  auto d = compute_desired({entry("nvidia.com/gpu", {kGpu0})}, inv, kPolicy);
  for (const auto& w : d.wanted) EXPECT_EQ(w.name.find("nvidia-uvm"), std::string::npos) << w.name;
}

TEST(Desired, ModesetIsWantedWhenItsNodeExists) {
  Inventory inv = host();
  inv.dev_nodes["nvidia-modeset"] = {DeviceType::kChar, 195, 254};
  auto n = names(compute_desired({entry("nvidia.com/gpu", {kGpu0})}, inv, kPolicy).wanted);
  EXPECT_NE(std::find(n.begin(), n.end(), "nvidia-modeset=195:254"), n.end());
}

TEST(Desired, ExistingNodeNumbersWinOverTheTable) {
  Inventory inv = host();
  inv.dev_nodes["nvidia-uvm"] = {DeviceType::kChar, 511, 0};  // recreated with another major
  auto d = compute_desired({entry("nvidia.com/gpu", {kGpu0})}, inv, kPolicy);
  auto it = std::find_if(d.wanted.begin(), d.wanted.end(), [](auto& w) { return w.name == "nvidia-uvm"; });
  ASSERT_NE(it, d.wanted.end());
  EXPECT_EQ(it->dev.major, 511u);
}

TEST(Desired, MigDeviceNeedsParentGpuAndBothCaps) {
  auto d = compute_desired({entry("nvidia.com/mig-1g.12gb", {kMig})}, host(), kPolicy);
  ASSERT_TRUE(d.unresolved.empty()) << d.unresolved[0];
  auto n = names(d.wanted);
  EXPECT_NE(std::find(n.begin(), n.end(), "nvidia1=195:1"), n.end());
  EXPECT_NE(std::find(n.begin(), n.end(), "nvidia-caps/nvidia-cap21=240:21"), n.end());
  EXPECT_NE(std::find(n.begin(), n.end(), "nvidia-caps/nvidia-cap22=240:22"), n.end());
  // never the config/monitor caps
  for (const auto& w : d.wanted) EXPECT_FALSE(w.dev.major == 240 && (w.dev.minor == 1 || w.dev.minor == 2));
}

TEST(Desired, UnmappedMigIsReportedNotGuessed) {
  Inventory inv = host();
  inv.migs.clear();
  auto d = compute_desired({entry("nvidia.com/mig-1g.12gb", {kMig})}, inv, kPolicy);
  EXPECT_TRUE(d.holds_gpu);
  ASSERT_EQ(d.unresolved.size(), 1u);
  EXPECT_NE(d.unresolved[0].find(kMig), std::string::npos);
  for (const auto& w : d.wanted) EXPECT_EQ(w.reason, "control");
}

TEST(Desired, ReplicasAndDuplicatesCollapse) {
  auto d = compute_desired({entry("nvidia.com/gpu", {std::string(kGpu0) + "::3", std::string(kGpu0) + "::7", kGpu0})},
                           host(), kPolicy);
  EXPECT_EQ(std::count_if(d.wanted.begin(), d.wanted.end(), [](auto& w) { return w.name == "nvidia0"; }), 1);
}

TEST(Desired, UnknownGpuIsUnresolved) {
  auto d = compute_desired({entry("nvidia.com/gpu", {"GPU-deadbeef-0000-0000-0000-000000000000"})}, host(), kPolicy);
  ASSERT_EQ(d.unresolved.size(), 1u);
  EXPECT_NE(d.unresolved[0].find("no such GPU"), std::string::npos);
}

TEST(Desired, OtherResourcesAreIgnored) {
  auto d = compute_desired({entry("example.com/fpga", {kGpu0}), entry("nvidia.com/gpu", {})}, host(), kPolicy);
  EXPECT_FALSE(d.holds_gpu);
  EXPECT_TRUE(d.wanted.empty());
}

TEST(Desired, DeviceSpecsAreGrantsWithTheirPermissions) {
  AllocationEntry e = entry("nvidia.com/gpu", {});
  e.device_specs = {{"/dev/nvidia1", "/dev/nvidia1", "rwm"}, {"/dev/nvidiactl", "/dev/nvidiactl", "rw"},
                    {"/dev/missing", "/dev/missing", "rw"}, {"/x", "/etc/passwd", "rw"}};
  auto d = compute_desired({e}, host(), kPolicy);
  EXPECT_TRUE(d.holds_gpu);
  auto it = std::find_if(d.wanted.begin(), d.wanted.end(), [](auto& w) { return w.name == "nvidia1"; });
  ASSERT_NE(it, d.wanted.end());
  EXPECT_EQ(it->access, kAccessAll);
  EXPECT_EQ(d.unresolved.size(), 2u);
}

TEST(Missing, OnlyWhatTheListDoesNotCover) {
  auto d = compute_desired({entry("nvidia.com/gpu", {kGpu0})}, host(), kPolicy);
  auto list = parse_devices_list("c 195:0 rw\nc 195:255 rw\nc 195:254 rw\nc *:* m\n");
  ASSERT_TRUE(list.ok());
  auto missing = missing_devices(d, *list);
  EXPECT_EQ(names(missing), (std::vector<std::string>{"nvidia-uvm=237:0", "nvidia-uvm-tools=237:1"}));
  auto rules = grant_rules(missing);
  ASSERT_EQ(rules.size(), 2u);
  EXPECT_EQ(format_device_rule(rules[0]), "c 237:0 rw");
  EXPECT_EQ(format_device_rule(rules[1]), "c 237:1 rw");
  EXPECT_TRUE(missing_devices(d, *parse_devices_list("a *:* rwm")).empty());
}

TEST(ResourceGlobs, MatchLikeTheShell) {
  EXPECT_TRUE(resource_matches({"nvidia.com/mig-*"}, "nvidia.com/mig-1g.12gb"));
  EXPECT_FALSE(resource_matches({"nvidia.com/mig-*"}, "nvidia.com/gpu"));
  EXPECT_TRUE(resource_matches({"nvidia.com/gpu"}, "nvidia.com/gpu"));
  EXPECT_FALSE(resource_matches({"nvidia.com/gpu"}, "nvidia.com/gpu.shared"));
}

}  // namespace
}  // namespace gdw
