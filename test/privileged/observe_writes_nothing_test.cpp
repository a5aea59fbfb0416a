// Observe mode writes nothing: no grant, no device program, no unit property. A GPU
// container whose GPU was never granted (and then re-applied, as runc and systemd do) is
// watched by the daemon in observe mode, with the probe; the daemon must report it as
// missing its GPU and leave every device rule, attached program and DeviceAllow= exactly
// as the re-appliers left them (the GPU still EPERM inside). Observe mode is the control
// of the real-runtime measurements: a single write would spoil it.
#include <gtest/gtest.h>

#include <sys/stat.h>

#include <cerrno>
#include <filesystem>
#include <memory>
#include <set>
#include <sstream>
#include <thread>

#include "support/daemon_harness.h"
#include "support/device_program_tools.h"
#include "support/metrics_text.h"
#include "support/nspawn_systemd.h"
#include "support/process.h"
#include "support/sandbox_node.h"
#include "support/systemd_gpu_node.h"

namespace gdw::test {
namespace {

namespace fs = std::filesystem;
using std::chrono::milliseconds;

constexpr const char* kObserve = "mode: observe\n";

// What the daemon could have changed for a container: its rule list (v1) or the programs
// attached to its cgroup (v2).
std::string policy_of(const SandboxNode& node, const SandboxContainer& c, bool v2) {
  if (v2) return describe(attached_device_programs(c.cgroup_dir));
  return read_file(c.cgroup_dir + "/devices.list");
}

class ObserveWritesNothing : public ::testing::TestWithParam<bool> {};

TEST_P(ObserveWritesNothing, ItReportsTheMissingGpuAndLeavesEveryRuleAsTheRuntimeLeftIt) {
  const bool v2 = GetParam();
  if (!SandboxNode::available(v2)) GTEST_SKIP() << "needs root and the cgroup " << (v2 ? "v2" : "v1 devices") << " hierarchy";
  SandboxNode::Options options;
  options.v2 = v2;
  options.tag = "observe";
  SandboxNode node(options);
  const auto& c = node.add_container({.pod_name = "cuda-0", .container_name = "cuda",
                                      .device_ids = {node.gpu_uuid(0)}, .hook_grants_gpu = false});
  node.write_checkpoint();
  ASSERT_EQ(node.open_errno(c, "nvidia0"), EPERM) << "the hook never granted the GPU";
  DaemonHarness daemon(node);
  ASSERT_TRUE(daemon.start(kObserve, /*probe=*/true)) << daemon.output();
  ASSERT_TRUE(eventually([&] { return daemon.metric("gpu_devwatch_containers_missing_devices") == 1; },
                         std::chrono::seconds(5)))
      << daemon.output();
  // Re-applies the daemon sees (a runc-named writer that exits; the spec again), as enforce
  // mode would repair.
  if (v2) {
    node.reapply_spec(c.cgroup_rel);
  } else {
    ASSERT_TRUE(node.reapply_as_old_runc(c, "runc"));
  }
  const std::string after_reapply = policy_of(node, c, v2);
  std::this_thread::sleep_for(milliseconds(500));  // enforce mode repairs within milliseconds
  EXPECT_EQ(policy_of(node, c, v2), after_reapply) << "observe mode changed the container's device policy\n"
                                                   << daemon.output();
  EXPECT_EQ(node.open_errno(c, "nvidia0"), EPERM) << "observe mode granted the GPU";
  EXPECT_EQ(daemon.metric("gpu_devwatch_containers_missing_devices"), 1) << "and still says so";
  EXPECT_LE(daemon.metric("gpu_devwatch_regrants_total", {{"result", "success"}, {"method", v2 ? "bpf" : "cgroupfs"}}),
            0)
      << "no grant counted (absent or 0)";
}

INSTANTIATE_TEST_SUITE_P(Cgroups, ObserveWritesNothing, ::testing::Values(false, true),
                         [](const ::testing::TestParamInfo<bool>& info) { return info.param ? "V2" : "V1"; });

// Under real systemd (cgroup v2, the systemd driver): no DeviceAllow= added to the scope,
// nothing over D-Bus, no program swapped, also across a daemon-reload.
TEST(ObserveWritesNothingUnderSystemd, NoUnitPropertyAndNoProgramChange) {
  const auto boot = systemd_boot_prerequisites(CgroupMode::kV2);
  if (!boot.skip.empty()) GTEST_SKIP() << boot.skip;
  ASSERT_EQ(boot.failure, "");
  NspawnSystemd systemd(boot.rootfs, CgroupMode::kV2);
  ASSERT_TRUE(systemd.ok()) << systemd.error();
  SystemdGpuNode node(systemd);
  ASSERT_EQ(node.error(), "");
  std::vector<std::string> properties = {"DevicePolicy=strict"};
  for (const auto& [path, access] : runc_default_device_allow()) properties.push_back("DeviceAllow=" + path + " " + access);
  std::string why;
  const ScopeContainer c = node.start_container(properties, SandboxNode::spec_rules(), &why);
  ASSERT_GT(c.pid, 0) << why;
  ASSERT_EQ(node.open_errno(c, "nvidia0"), EPERM) << "DevicePolicy=strict without the GPU";
  // As a set: systemd 252 lists a transient scope's entries in the other order after a
  // daemon-reload.
  auto device_allow = [&] {
    std::set<std::string> entries;
    std::istringstream lines(systemd.run_inside({"systemctl", "show", "--property=DeviceAllow", c.unit}).out);
    for (std::string line; std::getline(lines, line);) entries.insert(line);
    std::string text;
    for (const auto& e : entries) text += e + "\n";
    return text;
  };
  auto drop_ins = [&] {
    std::string found;
    for (const auto& dir : node.unit_dirs()) {
      std::error_code ec;
      for (const auto& e : fs::recursive_directory_iterator(dir + "/" + c.unit + ".d", ec))
        found += e.path().filename().string() + " ";
    }
    return found;
  };
  const std::string allow_before = device_allow(), drop_ins_before = drop_ins();
  const int port = free_port();
  BackgroundProcess daemon({GDW_BINARY, "run", "--config", node.config(port, kObserve)});
  ASSERT_TRUE(daemon.wait_for_output(" ready", std::chrono::seconds(20))) << daemon.output();
  ASSERT_TRUE(eventually([&] { return metric_value(http_get(port), "gpu_devwatch_containers_missing_devices") == 1; },
                         std::chrono::seconds(10)))
      << http_get(port) << daemon.output();
  auto reload = systemd.run_inside({"systemctl", "daemon-reload"});
  ASSERT_EQ(reload.exit_code, 0) << reload.out << reload.err;
  std::this_thread::sleep_for(milliseconds(300));  // systemd's new program is attached by now
  const std::string programs = describe(attached_device_programs(c.cgroup));
  std::this_thread::sleep_for(milliseconds(700));  // enforce mode persists and repairs within this
  EXPECT_EQ(device_allow(), allow_before) << "observe mode changed the scope's DeviceAllow=\n" << daemon.output();
  EXPECT_EQ(drop_ins(), drop_ins_before) << "observe mode wrote a unit drop-in";
  EXPECT_EQ(describe(attached_device_programs(c.cgroup)), programs) << "observe mode swapped a program";
  EXPECT_EQ(node.open_errno(c, "nvidia0"), EPERM) << "observe mode granted the GPU";
  EXPECT_EQ(daemon.output().find("systemd now allows"), std::string::npos) << daemon.output();
  daemon.signal(SIGTERM);
  daemon.wait(std::chrono::seconds(10));
}

}  // namespace
}  // namespace gdw::test
