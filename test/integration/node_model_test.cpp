// NodeModel's generation: it must move exactly when something resolve() depends on changed,
// since the daemon skips re-resolving containers otherwise (the periodic resync at 500
// containers depends on it).
#include "node/node_model.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include "support/temp_dir.h"

namespace gdw {
namespace {

class NodeModelGeneration : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_.mkdirs("cgroup/devices/kubepods");
    dir_.write("proc/devices", "Character devices:\n195 nvidia\n\nBlock devices:\n");
    dir_.write("proc/driver/nvidia/gpus/0000:0f:00.0/information", "GPU UUID: GPU-aaaa-1\nDevice Minor: 0\n");
    write_checkpoint_file({});
    config_.cgroup.root = dir_ / "cgroup";
    config_.kubelet.checkpoint = dir_ / "ckpt";
    config_.devices.proc_root = dir_ / "proc";
    config_.devices.dev_root = dir_ / "dev";
    config_.runtime.state_dirs = {dir_ / "run"};
  }
  void write_checkpoint_file(const std::vector<CheckpointWriteEntry>& entries) {
    // As kubelet does: a new file renamed over the old one.
    dir_.write("ckpt.tmp", write_checkpoint(entries, {{"nvidia.com/gpu", {"GPU-aaaa-1"}}}));
    ASSERT_EQ(::rename((dir_ / "ckpt.tmp").c_str(), (dir_ / "ckpt").c_str()), 0);
  }
  test::TempDir dir_{"gdw-node-model"};
  Config config_;
};

TEST_F(NodeModelGeneration, MovesOnlyWhenAnInputChanges) {
  NodeModel node(config_);
  ASSERT_TRUE(node.locate().ok());
  node.load_inventory();
  ASSERT_TRUE(node.load_checkpoint().ok());
  node.bundles().refresh();
  const auto g0 = node.generation();

  // The periodic resync re-reads everything: nothing changed, nothing moves.
  node.load_inventory();
  ASSERT_TRUE(node.load_checkpoint().ok());
  node.bundles().refresh();
  node.rebuild_allocations();
  node.set_pod_resources({});
  const auto g1 = node.generation();
  node.set_pod_resources({});
  EXPECT_EQ(node.generation(), g1) << "the same PodResources answer twice";
  node.load_inventory();
  ASSERT_TRUE(node.load_checkpoint().ok());
  EXPECT_EQ(node.generation(), g1);
  EXPECT_GE(g1, g0);

  // A new checkpoint (renamed into place).
  CheckpointWriteEntry e;
  e.pod_uid = "uid-1";
  e.container_name = "c";
  e.resource = "nvidia.com/gpu";
  e.device_ids_by_numa[0] = {"GPU-aaaa-1"};
  write_checkpoint_file({e});
  ASSERT_TRUE(node.load_checkpoint().ok());
  const auto g2 = node.generation();
  EXPECT_GT(g2, g1);
  ASSERT_NE(node.allocations().find("uid-1", "c"), nullptr) << "allocations rebuilt from the new record";

  // A GPU appears on the host.
  dir_.write("proc/driver/nvidia/gpus/0000:10:00.0/information", "GPU UUID: GPU-bbbb-2\nDevice Minor: 1\n");
  node.load_inventory();
  const auto g3 = node.generation();
  EXPECT_GT(g3, g2);

  // A bundle appears.
  dir_.write("run/" + std::string(64, 'a') + "/config.json", "{}");
  node.bundles().refresh();
  EXPECT_GT(node.generation(), g3);
}

}  // namespace
}  // namespace gdw
