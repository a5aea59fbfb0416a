// Never inside a runtime's apply, DeviceAllow= included. With the systemd cgroup driver the
// daemon adds the GPU to a scope's DeviceAllow= over D-Bus, and systemd then applies the
// unit's devices again: on cgroup v2 it attaches a new program and detaches its old one.
// runc's create looks at the scope's programs and then replaces the one it saw (runc 1.1:
// ENOENT when systemd swapped it in between, the start fails); runc 1.0 found the GPU back
// while it still created (the CRI matrix's v2-systemd-runc-rc93 cell, beside a busy loop).
// Under a real systemd 252 (nspawn), a container appears while the daemon runs and its
// create goes on (no pid file yet): nothing may change its DeviceAllow= or its programs, nor
// grant it the GPU, until the create has ended; then both come.
#include <gtest/gtest.h>

#include <cerrno>
#include <chrono>
#include <csignal>
#include <memory>
#include <sstream>
#include <string>
#include <thread>

#include "support/device_program_tools.h"
#include "support/metrics_text.h"
#include "support/nspawn_systemd.h"
#include "support/process.h"
#include "support/sandbox_node.h"
#include "support/temp_dir.h"
#include "support/systemd_gpu_node.h"
#include "support/systemd_node_test.h"

namespace gdw::test {
namespace {

using std::chrono::milliseconds;

class SystemdCreate : public SystemdNodeTest {
 protected:
  void SetUp() override {
    SystemdNodeTest::SetUp();
    if (!ready()) return;
    properties_ = {"DevicePolicy=strict"};
    for (const auto& [path, access] : runc_default_device_allow())
      properties_.push_back("DeviceAllow=" + path + " " + access);
  }

  void TearDown() override {
    if (daemon_) {
      daemon_->signal(SIGTERM);
      daemon_->wait(std::chrono::seconds(10));
    }
  }

  bool gpu_in_device_allow(const ScopeContainer& c) const {
    return systemd_->run_inside({"systemctl", "show", "--property=DeviceAllow", c.unit}).out.find("/dev/char/195:0 rw") !=
           std::string::npos;
  }
  // Whether the daemon said it watches `c` as a GPU container.
  bool watched(const ScopeContainer& c) const {
    std::istringstream lines(daemon_->output());
    for (std::string line; std::getline(lines, line);)
      if (line.find("watching GPU container") != std::string::npos && line.find(c.unit) != std::string::npos)
        return true;
    return false;
  }
  // v2: the programs attached to the scope's cgroup; v1: its rules.
  std::string device_policy(const ScopeContainer& c) const {
    return GetParam() == CgroupMode::kV2 ? describe(attached_device_programs(c.cgroup))
                                         : read_file(c.cgroup + "/devices.list");
  }

  std::vector<std::string> properties_;
  std::unique_ptr<BackgroundProcess> daemon_;
  int port_ = free_port();
};

TEST_P(SystemdCreate, NothingIsPersistedOrGrantedUntilTheCreateEnds) {
  // The first container makes the node's kubepods slice known to the configuration.
  std::string why;
  const ScopeContainer first = node_->start_container(properties_, SandboxNode::spec_rules(), &why);
  ASSERT_GT(first.pid, 0) << why;
  // Its defaults, but for a wait's limit far beyond the looks below: each look starts a
  // process inside the node, and 20 of them took over a second on a loaded CI machine, past
  // the default 1 s, after which the daemon grants and persists by design.
  daemon_ = std::make_unique<BackgroundProcess>(std::vector<std::string>{
      GDW_BINARY, "run", "--config", node_->config(port_, "repair:\n  apply_wait_limit: 20s\n")});
  ASSERT_TRUE(daemon_->wait_for_output(" ready", std::chrono::seconds(20))) << daemon_->output();

  // A new pod's container, given the GPU, whose runtime has not written its pid file yet.
  const ScopeContainer c = node_->start_container(properties_, SandboxNode::spec_rules(), &why, /*create_ended=*/false);
  ASSERT_GT(c.pid, 0) << why;
  ASSERT_TRUE(eventually([&] { return watched(c); }, std::chrono::seconds(10))) << daemon_->output();
  const std::string policy = device_policy(c);
  // Well within the wait's limit, long past a D-Bus round trip.
  for (int look = 0; look < 20; ++look) {
    std::this_thread::sleep_for(milliseconds(20));
    ASSERT_FALSE(gpu_in_device_allow(c)) << "DeviceAllow= persisted while the create went on (look " << look << ")\n"
                                         << daemon_->output();
    ASSERT_EQ(node_->open_errno(c, "nvidia0"), EPERM) << "granted while the create went on\n" << daemon_->output();
  }
  EXPECT_EQ(device_policy(c), policy) << "the scope's device policy changed while the create went on";

  node_->end_create(c);
  EXPECT_TRUE(eventually([&] { return node_->open_errno(c, "nvidia0") == ENXIO; }, std::chrono::seconds(2)))
      << "not granted once the create ended\n" << daemon_->output();
  EXPECT_EQ(node_->open_errno(c, "nvidia1"), EPERM) << "not allocated";
  EXPECT_TRUE(eventually([&] { return gpu_in_device_allow(c); }, std::chrono::seconds(2)))
      << "not persisted once the create ended\n" << daemon_->output();
  EXPECT_EQ(metric_value(http_get(port_), "gpu_devwatch_apply_waits_total", {{"until", "limit"}}).value_or(0), 0)
      << "the create's end was not seen\n" << daemon_->output();
}

INSTANTIATE_TEST_SUITE_P(CgroupModes, SystemdCreate, ::testing::Values(CgroupMode::kV2, CgroupMode::kV1),
                         [](const ::testing::TestParamInfo<CgroupMode>& info) {
                           return info.param == CgroupMode::kV2 ? "V2" : "V1";
                         });

}  // namespace
}  // namespace gdw::test
