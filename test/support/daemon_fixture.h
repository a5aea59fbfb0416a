// The shape most privileged daemon tests share: a SandboxNode (the test is skipped where
// the machine has none) and a DaemonHarness on it, stopped at the end of every test. Tests
// add their containers and start the daemon themselves; a fixture deriving from these
// calls the base SetUp first and returns when it skipped.
#pragma once

#include <gtest/gtest.h>

#include <memory>

#include "support/daemon_harness.h"

namespace gdw::test {

inline constexpr const char* kNeedsSandboxNode = "needs root and a writable cgroup v1 devices hierarchy";

class DaemonTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!SandboxNode::available()) GTEST_SKIP() << kNeedsSandboxNode;
    node_ = std::make_unique<SandboxNode>();
    daemon_ = std::make_unique<DaemonHarness>(*node_);
  }
  void TearDown() override {
    if (daemon_) daemon_->stop();
  }
  // Whether SetUp got as far as a node: false after a skip or a fatal failure.
  bool set_up() const { return node_ && !IsSkipped() && !HasFatalFailure(); }

  std::unique_ptr<SandboxNode> node_;
  std::unique_ptr<DaemonHarness> daemon_;
};

// The same with one GPU container in the checkpoint: ml/trainer-0/trainer holding GPU 0
// (nvidia0), granted by the runtime hook at creation.
class DaemonWithTrainerTest : public DaemonTest {
 protected:
  void SetUp() override {
    DaemonTest::SetUp();
    if (!set_up()) return;
    c_ = &node_->add_container({.pod_namespace = "ml", .pod_name = "trainer-0", .container_name = "trainer",
                                .device_ids = {node_->gpu_uuid(0)}});
    node_->write_checkpoint();
  }
  const SandboxContainer* c_ = nullptr;
};

}  // namespace gdw::test
