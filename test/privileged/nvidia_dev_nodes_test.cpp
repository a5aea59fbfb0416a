// The dev scan against real device nodes: mknod'ed in a temporary directory with the
// numbers an NVIDIA host has, so stat() reports st_rdev as it would under /dev.
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>

#include <cerrno>
#include <cstring>
#include <string>

#include "nvidia/inventory.h"
#include "support/process.h"
#include "support/temp_dir.h"

namespace gdw {
namespace {

using test::TempDir;

// False (with the reason) when this environment cannot create device nodes.
bool make_node(const std::string& path, mode_t type, std::uint32_t major, std::uint32_t minor, std::string& why) {
  if (::mknod(path.c_str(), type | 0600, ::makedev(major, minor)) == 0) return true;
  why = "mknod " + path + ": " + std::strerror(errno);
  return false;
}

TEST(NvidiaDevNodes, ScanRecordsCharacterNodesWithTheirNumbers) {
  if (!test::is_root()) GTEST_SKIP() << "needs root to mknod";
  TempDir proc("gdw-proc");
  proc.write("devices", "Character devices:\n195 nvidia\n195 nvidiactl\n238 nvidia-caps\n239 nvidia-uvm\n");
  proc.write("driver/nvidia/gpus/0000:0f:00.0/information", "GPU UUID: GPU-a\nDevice Minor: 0\n");
  TempDir dev("gdw-dev");
  dev.mkdirs("nvidia-caps");
  std::string why;
  if (!make_node(dev / "nvidia0", S_IFCHR, 195, 0, why)) GTEST_SKIP() << why << " (no CAP_MKNOD here?)";
  ASSERT_TRUE(make_node(dev / "nvidia1", S_IFCHR, 195, 1, why)) << why;
  ASSERT_TRUE(make_node(dev / "nvidiactl", S_IFCHR, 195, 255, why)) << why;
  ASSERT_TRUE(make_node(dev / "nvidia-uvm", S_IFCHR, 239, 0, why)) << why;
  ASSERT_TRUE(make_node(dev / "nvidia-uvm-tools", S_IFCHR, 239, 1, why)) << why;
  ASSERT_TRUE(make_node(dev / "nvidia-caps/nvidia-cap1", S_IFCHR, 238, 1, why)) << why;
  ASSERT_TRUE(make_node(dev / "nvidia-caps/nvidia-cap13", S_IFCHR, 238, 13, why)) << why;
  ASSERT_TRUE(make_node(dev / "nvidia-blk", S_IFBLK, 7, 0, why)) << why;  // not a character device
  ASSERT_TRUE(make_node(dev / "vfio", S_IFCHR, 10, 196, why)) << why;     // not an NVIDIA name

  Inventory inv = read_inventory(InventoryOptions{proc.path(), dev.path(), {}});

  EXPECT_TRUE(inv.problems.empty());
  auto c = [](std::uint32_t major, std::uint32_t minor) { return DeviceNumber{DeviceType::kChar, major, minor}; };
  std::map<std::string, DeviceNumber> expected = {
      {"nvidia0", c(195, 0)},
      {"nvidia1", c(195, 1)},
      {"nvidiactl", c(195, 255)},
      {"nvidia-uvm", c(239, 0)},
      {"nvidia-uvm-tools", c(239, 1)},
      {"nvidia-caps/nvidia-cap1", c(238, 1)},
      {"nvidia-caps/nvidia-cap13", c(238, 13)},
  };
  EXPECT_EQ(inv.dev_nodes, expected);

  // A node created after the first scan (seed 001: nvidia-uvm appeared later) is found by
  // name, and so is a non-NVIDIA node a DeviceSpec names.
  ASSERT_TRUE(make_node(dev / "nvidia-modeset", S_IFCHR, 195, 254, why)) << why;
  add_dev_nodes(inv, dev.path(), {"nvidia-modeset", "vfio", "nvidia-blk"});
  EXPECT_EQ(inv.dev_nodes.at("nvidia-modeset"), c(195, 254));
  EXPECT_EQ(inv.dev_nodes.at("vfio"), c(10, 196));
  EXPECT_EQ(inv.dev_nodes.count("nvidia-blk"), 0u);
  ASSERT_EQ(inv.problems.size(), 1u);
  EXPECT_EQ(inv.problems[0], dev / "nvidia-blk" + ": not a character device");
}

}  // namespace
}  // namespace gdw
