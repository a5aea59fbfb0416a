// The daemon with the systemd cgroup driver, against a real systemd 252 booted in
// systemd-nspawn (v1 and v2): a kubepods-style scope whose DeviceAllow= lacks the GPU, the
// GPU granted behind systemd's back as the runtime hook does, `systemctl daemon-reload`
// takes it away (v1), the daemon repairs it and adds it to the scope's DeviceAllow= over
// D-Bus (v2: at first sight, so the reload takes nothing); the next reload no longer denies it.
#include <gtest/gtest.h>

#include <cerrno>
#include <chrono>
#include <thread>

#include "backend/device_programs_v2.h"
#include "support/cgroup_sandbox.h"
#include "support/metrics_text.h"
#include "support/nspawn_systemd.h"
#include "support/process.h"
#include "support/systemd_gpu_node.h"
#include "support/systemd_node_test.h"

namespace gdw::test {
namespace {

class DaemonWithSystemd : public SystemdNodeTest {
 protected:
  void SetUp() override {
    SystemdNodeTest::SetUp();
    if (!ready()) return;
    std::string why;
    c_ = node_->start_container({"DevicePolicy=strict", "DeviceAllow=/dev/char/1:3 rwm"},
                                {{false, DeviceRule{}}, {true, DeviceRule{DeviceType::kChar, 1, 3, kAccessAll}}}, &why);
    ASSERT_GT(c_.pid, 0) << why;
  }

  std::string config(int port) {
    return node_->config(port, "probe:\n  enabled: true\ndaemon:\n  program_query_interval: 300ms\nlog:\n  level: debug\n");
  }

  int open_errno(const std::string& node) { return node_->open_errno(c_, node); }
  bool eventually_open(const std::string& node, int want) {
    return eventually([&] { return open_errno(node) == want; }, std::chrono::seconds(5));
  }
  void daemon_reload() {
    auto r = systemd_->run_inside({"systemctl", "daemon-reload"});
    ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
  }

  ScopeContainer c_;
};

TEST_P(DaemonWithSystemd, RepairsAfterDaemonReloadAndTheNextReloadKeepsTheGpu) {
  const std::vector<WantedDevice> all = {
      {{DeviceType::kChar, 195, 0}, kAccessReadWrite, "nvidia0", ""},
      {{DeviceType::kChar, 195, 255}, kAccessReadWrite, "nvidiactl", ""},
      {{DeviceType::kChar, 237, 0}, kAccessReadWrite, "nvidia-uvm", ""},
      {{DeviceType::kChar, 237, 1}, kAccessReadWrite, "nvidia-uvm-tools", ""}};
  // The runtime hook grants the GPU and the control nodes behind systemd's back.
  if (GetParam() == CgroupMode::kV1) {
    for (const char* rule : {"c 195:0 rw", "c 195:255 rw", "c 237:0 rw", "c 237:1 rw"})
      ASSERT_EQ(write_kernel_file(c_.cgroup + "/devices.allow", rule), 0);
  } else {
    auto hook = repair_device_programs(c_.cgroup, all);
    ASSERT_TRUE(hook.ok()) << hook.error().message;
  }
  ASSERT_EQ(open_errno("nvidia0"), ENXIO);

  const int port = free_port();
  BackgroundProcess daemon({GDW_BINARY, "run", "--config", config(port)});
  ASSERT_TRUE(daemon.wait_for_output(" ready")) << daemon.output();
  EXPECT_EQ(metric_value(http_get(port), "gpu_devwatch_containers_watched"), 1) << daemon.output();

  const std::string direct = GetParam() == CgroupMode::kV1 ? "cgroupfs" : "bpf";
  auto direct_grants = [&] {
    return metric_value(http_get(port), "gpu_devwatch_regrants_total", {{"method", direct}, {"result", "success"}})
        .value_or(0);
  };
  if (GetParam() == CgroupMode::kV1) {
    daemon_reload();  // systemd re-applies DeviceAllow=: the GPU is gone, the daemon grants it back
    EXPECT_TRUE(eventually_open("nvidia0", ENXIO)) << daemon.output();
    EXPECT_TRUE(eventually_open("nvidia-uvm", ENXIO)) << daemon.output();
    EXPECT_TRUE(daemon.wait_for_output("systemd now allows")) << daemon.output();
    EXPECT_GE(direct_grants(), 1) << "the reload revoked and the daemon granted directly first";
  } else {
    // cgroup v2: the daemon persists at first sight (a reload there attaches a program of
    // systemd's own), so the reload finds the GPU in DeviceAllow= already: nothing to repair.
    EXPECT_TRUE(daemon.wait_for_output("systemd now allows")) << daemon.output();
    daemon_reload();
    EXPECT_EQ(open_errno("nvidia0"), ENXIO) << daemon.output();
    EXPECT_EQ(open_errno("nvidia-uvm"), ENXIO);
    std::this_thread::sleep_for(std::chrono::milliseconds(600));  // two program queries
    EXPECT_EQ(direct_grants(), 0) << "the reload revoked nothing" << daemon.output();
  }
  EXPECT_GE(metric_value(http_get(port), "gpu_devwatch_regrants_total", {{"method", "systemd"}, {"result", "success"}})
                .value_or(0),
            1);
  const std::string drop_in = read_file(systemd_->root_path("/run/systemd/transient/" + c_.unit + ".d/50-DeviceAllow.conf"));
  EXPECT_NE(drop_in.find("DeviceAllow=/dev/char/195:0 rw"), std::string::npos) << drop_in;

  // With the daemon stopped, a second reload must not deny the GPU: systemd keeps it now.
  daemon.signal(SIGTERM);
  ASSERT_EQ(daemon.wait(std::chrono::seconds(10)), 0);
  daemon_reload();
  EXPECT_EQ(open_errno("nvidia0"), ENXIO) << "DeviceAllow= persisted: the reload keeps the GPU";
  EXPECT_EQ(open_errno("nvidia-uvm"), ENXIO);
  EXPECT_EQ(open_errno("nvidia1"), EPERM) << "nothing beyond the allocation";
}

INSTANTIATE_TEST_SUITE_P(CgroupModes, DaemonWithSystemd, ::testing::Values(CgroupMode::kV1, CgroupMode::kV2),
                         [](const auto& info) { return to_string(info.param); });

}  // namespace
}  // namespace gdw::test
