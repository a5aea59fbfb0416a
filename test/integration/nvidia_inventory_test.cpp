// read_inventory on procfs-shaped fixture trees. Device nodes cannot be created without
// root, so the dev scan here uses symlinks to /dev/null and /dev/zero, which stat() follows;
// test/privileged/nvidia_dev_nodes_test.cpp covers real nodes.
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <string>

#include "nvidia/inventory.h"
#include "support/temp_dir.h"

namespace gdw {
namespace {

using test::TempDir;

const std::string kH20 = std::string(GDW_TEST_FIXTURES) + "/proc-h20-mig";
const std::string kOldDriver = std::string(GDW_TEST_FIXTURES) + "/proc-old-driver";

const DeviceNumber kDevNull{DeviceType::kChar, 1, 3};
const DeviceNumber kDevZero{DeviceType::kChar, 1, 5};

bool has_problem(const Inventory& inventory, const std::string& part) {
  return std::any_of(inventory.problems.begin(), inventory.problems.end(),
                     [&](const std::string& p) { return p.find(part) != std::string::npos; });
}

std::string problems_of(const Inventory& inventory) {
  std::string all;
  for (const auto& p : inventory.problems) all += p + "\n";
  return all;
}

void symlink_or_fail(const std::string& target, const std::string& path) {
  ASSERT_EQ(::symlink(target.c_str(), path.c_str()), 0) << path;
}

TEST(ReadInventory, H20WithMigFromFixture) {
  TempDir dev("gdw-dev");
  InventoryOptions options{kH20, dev.path(), {}};
  Inventory inv = read_inventory(options);

  EXPECT_TRUE(inv.problems.empty()) << problems_of(inv);
  EXPECT_EQ(inv.nvidia_major(), 195u);
  EXPECT_EQ(inv.char_major("nvidiactl"), 195u);
  EXPECT_EQ(inv.char_major("nvidia-uvm"), 239u);
  EXPECT_EQ(inv.char_major("nvidia-caps"), 238u);
  EXPECT_EQ(inv.char_major("nvidia-caps-imex-channels"), 240u);
  EXPECT_EQ(inv.char_major("loop"), std::nullopt) << "block devices are not character majors";

  ASSERT_EQ(inv.gpus.size(), 2u);
  const GpuDevice* first = inv.gpu_by_uuid("GPU-2f815c32-768d-d782-1073-db01d7b90215");
  ASSERT_NE(first, nullptr);
  EXPECT_EQ(first->minor, 0u);
  EXPECT_EQ(first->bus_location, "0000:0f:00.0");
  EXPECT_EQ(first->model, "NVIDIA H20");
  EXPECT_FALSE(first->excluded);
  const GpuDevice* second = inv.gpu_by_uuid("GPU-8a1e6b55-0d1c-4f4e-9b3e-3c0d5a2f7e41");
  ASSERT_NE(second, nullptr);
  EXPECT_EQ(second->minor, 1u);

  EXPECT_EQ(inv.mig_minors.at("config"), 1u);
  EXPECT_EQ(inv.mig_minors.at("gpu0/gi1/access"), 12u);
  EXPECT_EQ(inv.mig_minors.at("gpu0/gi1/ci0/access"), 13u);
  EXPECT_EQ(inv.mig_minors.at("gpu1/gi2/access"), 156u);

  EXPECT_TRUE(inv.migs.empty());
  EXPECT_EQ(inv.mig_source, "none");
  EXPECT_TRUE(inv.dev_nodes.empty());
}

TEST(ReadInventory, ConfiguredMigMapIsUsed) {
  TempDir dev("gdw-dev");
  std::vector<MigDevice> map = {{"MIG-aaa", 0, 1, 0}, {"MIG-bbb", 1, 2, 0}};
  Inventory inv = read_inventory(InventoryOptions{kH20, dev.path(), map});
  EXPECT_EQ(inv.migs, map);
  EXPECT_EQ(inv.mig_source, "config");
}

TEST(ReadInventory, OldDriverWithNvidiaFrontendAndNoCaps) {
  TempDir dev("gdw-dev");
  Inventory inv = read_inventory(InventoryOptions{kOldDriver, dev.path(), {}});
  EXPECT_TRUE(inv.problems.empty()) << problems_of(inv);
  EXPECT_EQ(inv.nvidia_major(), 195u);
  EXPECT_EQ(inv.char_major("nvidia"), std::nullopt);
  EXPECT_EQ(inv.char_major("nvidia-uvm"), 241u);
  ASSERT_EQ(inv.gpus.size(), 1u);
  EXPECT_EQ(inv.gpus[0].model, "Tesla T4");
  EXPECT_TRUE(inv.mig_minors.empty());
}

TEST(ReadInventory, NodeWithoutDriverIsEmptyWithANote) {
  TempDir proc("gdw-proc");
  TempDir dev("gdw-dev");
  proc.write("devices", "Character devices:\n  1 mem\n\nBlock devices:\n  7 loop\n");
  Inventory inv = read_inventory(InventoryOptions{proc.path(), dev.path(), {}});
  EXPECT_EQ(inv.nvidia_major(), std::nullopt);
  EXPECT_TRUE(inv.gpus.empty());
  EXPECT_TRUE(inv.mig_minors.empty());
  EXPECT_TRUE(inv.dev_nodes.empty());
  ASSERT_EQ(inv.problems.size(), 1u) << problems_of(inv);
  EXPECT_TRUE(has_problem(inv, "no NVIDIA driver loaded: " + proc.path() + "/driver/nvidia/gpus not found"))
      << problems_of(inv);
}

TEST(ReadInventory, EmptyProcRootNamesWhatIsMissing) {
  TempDir proc("gdw-proc");
  Inventory inv = read_inventory(InventoryOptions{proc.path(), proc.path() + "/no-dev", {}});
  EXPECT_TRUE(has_problem(inv, proc.path() + "/devices: not found")) << problems_of(inv);
  EXPECT_TRUE(has_problem(inv, "no NVIDIA driver loaded")) << problems_of(inv);
  EXPECT_TRUE(has_problem(inv, proc.path() + "/no-dev: not found")) << problems_of(inv);
}

// A tree where each file can be broken on purpose.
struct ProcTree {
  TempDir dir{"gdw-proc"};
  std::string gpu_a = "driver/nvidia/gpus/0000:0f:00.0/information";
  std::string gpu_b = "driver/nvidia/gpus/0000:34:00.0/information";
  std::string mig_minors = "driver/nvidia-caps/mig-minors";
  ProcTree() {
    dir.write("devices", "Character devices:\n195 nvidia\n195 nvidiactl\n238 nvidia-caps\n");
    dir.write(gpu_a, "GPU UUID: GPU-a\nDevice Minor: 0\n");
    dir.write(gpu_b, "GPU UUID: GPU-b\nDevice Minor: 1\n");
    dir.write(mig_minors, "config 1\ngpu0/gi1/access 12\n");
  }
};

TEST(ReadInventory, MalformedGpuFileIsNamedAndOtherGpusStay) {
  ProcTree tree;
  tree.dir.write(tree.gpu_a, "GPU UUID: GPU-a\nDevice Minor: zero\n");
  TempDir dev("gdw-dev");
  Inventory inv = read_inventory(InventoryOptions{tree.dir.path(), dev.path(), {}});
  ASSERT_EQ(inv.problems.size(), 1u) << problems_of(inv);
  EXPECT_EQ(inv.problems[0], tree.dir / tree.gpu_a + ": line 2: Device Minor 'zero' is not a number");
  ASSERT_EQ(inv.gpus.size(), 1u);
  EXPECT_EQ(inv.gpus[0].uuid, "GPU-b");
  EXPECT_EQ(inv.nvidia_major(), 195u);
  EXPECT_EQ(inv.mig_minors.at("gpu0/gi1/access"), 12u);
}

TEST(ReadInventory, UnreadableGpuFileIsNamedAndOtherGpusStay) {
  ProcTree tree;
  // Root reads any file, so unreadable is made by a directory in the file's place (EISDIR).
  test::remove_tree(tree.dir / tree.gpu_b);
  tree.dir.mkdirs(tree.gpu_b);
  TempDir dev("gdw-dev");
  Inventory inv = read_inventory(InventoryOptions{tree.dir.path(), dev.path(), {}});
  ASSERT_EQ(inv.problems.size(), 1u) << problems_of(inv);
  EXPECT_TRUE(has_problem(inv, tree.dir / tree.gpu_b + ": Is a directory")) << problems_of(inv);
  ASSERT_EQ(inv.gpus.size(), 1u);
  EXPECT_EQ(inv.gpus[0].uuid, "GPU-a");
}

TEST(ReadInventory, GpuDirectoryWithoutInformationFile) {
  ProcTree tree;
  tree.dir.mkdirs("driver/nvidia/gpus/0000:99:00.0");
  TempDir dev("gdw-dev");
  Inventory inv = read_inventory(InventoryOptions{tree.dir.path(), dev.path(), {}});
  EXPECT_TRUE(has_problem(inv, tree.dir / "driver/nvidia/gpus/0000:99:00.0/information: not found"))
      << problems_of(inv);
  EXPECT_EQ(inv.gpus.size(), 2u);
}

TEST(ReadInventory, MalformedProcDevicesIsNamedAndGpusStay) {
  ProcTree tree;
  tree.dir.write("devices", "Character devices:\n195 nvidia\nnvidia-uvm 239\n");
  TempDir dev("gdw-dev");
  Inventory inv = read_inventory(InventoryOptions{tree.dir.path(), dev.path(), {}});
  ASSERT_EQ(inv.problems.size(), 1u) << problems_of(inv);
  EXPECT_EQ(inv.problems[0], tree.dir / "devices" + ": line 3: expected '<major> <name>', got 'nvidia-uvm 239'");
  EXPECT_TRUE(inv.char_majors.empty());
  EXPECT_EQ(inv.gpus.size(), 2u);
  EXPECT_EQ(inv.mig_minors.size(), 2u);
}

TEST(ReadInventory, MalformedMigMinorsIsNamedAndTheRestStays) {
  ProcTree tree;
  tree.dir.write(tree.mig_minors, "config 1\ngpu0/gi1/access twelve\n");
  TempDir dev("gdw-dev");
  Inventory inv = read_inventory(InventoryOptions{tree.dir.path(), dev.path(), {}});
  ASSERT_EQ(inv.problems.size(), 1u) << problems_of(inv);
  EXPECT_EQ(inv.problems[0].rfind(tree.dir / tree.mig_minors + ": line 2: ", 0), 0u) << inv.problems[0];
  EXPECT_TRUE(inv.mig_minors.empty());
  EXPECT_EQ(inv.gpus.size(), 2u);
  EXPECT_EQ(inv.nvidia_major(), 195u);
}

TEST(ReadInventory, OversizedProcFileIsRefused) {
  ProcTree tree;
  tree.dir.write(tree.mig_minors, std::string(2 << 20, '\n'));
  TempDir dev("gdw-dev");
  Inventory inv = read_inventory(InventoryOptions{tree.dir.path(), dev.path(), {}});
  EXPECT_TRUE(has_problem(inv, tree.dir / tree.mig_minors + ": larger than")) << problems_of(inv);
  EXPECT_TRUE(inv.mig_minors.empty());
}

TEST(ReadInventory, ScansNvidiaNodesByWhatStatReports) {
  ProcTree tree;
  TempDir dev("gdw-dev");
  symlink_or_fail("/dev/null", dev / "nvidia0");
  symlink_or_fail("/dev/zero", dev / "nvidia-uvm");
  symlink_or_fail("/dev/null", dev / "null");  // not an NVIDIA name
  symlink_or_fail("/nonexistent", dev / "nvidia-uvm-tools");  // dangling: absent, not a problem
  dev.write("nvidiactl", "a regular file");
  dev.mkdirs("nvidia-caps");
  symlink_or_fail("/dev/zero", dev / "nvidia-caps/nvidia-cap12");
  symlink_or_fail("/dev/null", dev / "nvidia-caps/other");
  dev.mkdirs("nvidia-caps-imex-channels");

  Inventory inv = read_inventory(InventoryOptions{tree.dir.path(), dev.path(), {}});
  EXPECT_TRUE(inv.problems.empty()) << problems_of(inv);
  std::map<std::string, DeviceNumber> expected = {
      {"nvidia0", kDevNull}, {"nvidia-uvm", kDevZero}, {"nvidia-caps/nvidia-cap12", kDevZero}};
  EXPECT_EQ(inv.dev_nodes, expected);
}

TEST(ReadInventory, NvidiaCapsThatIsNotADirectoryHasNoCaps) {
  ProcTree tree;
  TempDir dev("gdw-dev");
  dev.write("nvidia-caps", "");
  Inventory inv = read_inventory(InventoryOptions{tree.dir.path(), dev.path(), {}});
  EXPECT_TRUE(inv.problems.empty()) << problems_of(inv);
  EXPECT_TRUE(inv.dev_nodes.empty());
}

TEST(AddDevNodes, StatsTheNamesAskedFor) {
  TempDir dev("gdw-dev");
  dev.mkdirs("dri");
  symlink_or_fail("/dev/null", dev / "dri/card0");
  symlink_or_fail("/dev/zero", dev / "fuse");
  dev.write("plain", "x");
  Inventory inv;
  add_dev_nodes(inv, dev.path(), {"dri/card0", "fuse", "missing", "plain", "../etc/passwd", "/dev/null", "a/../../b"});
  std::map<std::string, DeviceNumber> expected = {{"dri/card0", kDevNull}, {"fuse", kDevZero}};
  EXPECT_EQ(inv.dev_nodes, expected);
  EXPECT_TRUE(has_problem(inv, dev / "plain" + ": not a character device")) << problems_of(inv);
  EXPECT_TRUE(has_problem(inv, "'../etc/passwd' is not a path under")) << problems_of(inv);
  EXPECT_TRUE(has_problem(inv, "'/dev/null' is not a path under")) << problems_of(inv);
  EXPECT_TRUE(has_problem(inv, "'a/../../b' is not a path under")) << problems_of(inv);
  EXPECT_FALSE(has_problem(inv, "missing")) << "an absent node is not a problem";
  EXPECT_EQ(inv.problems.size(), 4u) << problems_of(inv);
}

}  // namespace
}  // namespace gdw
