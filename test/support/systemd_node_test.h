// The fixture of the tests under a real systemd (nspawn) in the parameter's cgroup mode:
// booted, with its GPU node (SystemdGpuNode). Skipped where it cannot run here
// (systemd_boot_prerequisites); a subclass's SetUp() calls this one first and returns when
// it skipped or failed.
#pragma once

#include <gtest/gtest.h>

#include <memory>

#include "support/nspawn_systemd.h"
#include "support/systemd_gpu_node.h"

namespace gdw::test {

class SystemdNodeTest : public ::testing::TestWithParam<CgroupMode> {
 protected:
  void SetUp() override {
    const auto boot = systemd_boot_prerequisites(GetParam());
    if (!boot.skip.empty()) GTEST_SKIP() << boot.skip;
    ASSERT_EQ(boot.failure, "");
    systemd_ = std::make_unique<NspawnSystemd>(boot.rootfs, GetParam());
    ASSERT_TRUE(systemd_->ok()) << systemd_->error();
    node_ = std::make_unique<SystemdGpuNode>(*systemd_);
    ASSERT_EQ(node_->error(), "");
  }
  bool ready() const { return !IsSkipped() && !HasFailure(); }

  std::unique_ptr<NspawnSystemd> systemd_;
  std::unique_ptr<SystemdGpuNode> node_;
};

}  // namespace gdw::test
