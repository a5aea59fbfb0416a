// The sandbox node's fixture majors: the usual ones on these VMs, free local-use ones on a
// host whose real NVIDIA driver holds them, so that a benchmark there never opens the real
// GPU (an open of a node whose major a driver holds reaches that driver).
#include <gtest/gtest.h>

#include "support/sandbox_node.h"

namespace gdw::test {
namespace {

TEST(FixtureMajors, TheUsualOnesWhereNoDriverHoldsThem) {
  const FixtureMajors m = fixture_majors_for_host("Character devices:\n  1 mem\n  4 tty\n 10 misc\n\nBlock devices:\n195 blk\n");
  EXPECT_EQ(m.nvidia, kNvidiaMajor);
  EXPECT_EQ(m.uvm, kUvmMajor);
  EXPECT_EQ(m.caps, kCapsMajor);
}

TEST(FixtureMajors, FreeLocalUseOnesOnAGpuHost) {
  // As on an H100 node: nvidia at 195, nvidia-uvm at a dynamic 238; a local driver at 60.
  const FixtureMajors m = fixture_majors_for_host(
      "Character devices:\n  1 mem\n 60 localdrv\n195 nvidia-frontend\n195 nvidia\n238 nvidia-uvm\n\nBlock devices:\n 61 blk\n");
  EXPECT_EQ(m.nvidia, 61u) << "a block major does not hold a character major";
  EXPECT_EQ(m.uvm, 62u);
  EXPECT_EQ(m.caps, 63u);
}

}  // namespace
}  // namespace gdw::test
