// The daemon with the systemd cgroup driver, against a real systemd 252 booted in
// systemd-nspawn (v1 and v2): a kubepods-style scope whose DeviceAllow= lacks the GPU, the
// GPU granted behind systemd's back as the runtime hook does, `systemctl daemon-reload`
// takes it away, the daemon repairs it and adds it to the scope's DeviceAllow= over D-Bus;
// the next reload no longer denies it.
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>

#include <cerrno>
#include <nlohmann/json.hpp>

#include "backend/device_programs_v2.h"
#include "support/cgroup_sandbox.h"
#include "support/metrics_text.h"
#include "support/nspawn_systemd.h"
#include "support/process.h"
#include "support/sandbox_node.h"

namespace gdw::test {
namespace {

constexpr const char* kGpu = "GPU-2f815c32-768d-d782-1073-db01d7b90215";

class DaemonWithSystemd : public ::testing::TestWithParam<CgroupMode> {
 protected:
  void SetUp() override {
    if (auto why = NspawnSystemd::unavailable_reason(GetParam()); !why.empty()) GTEST_SKIP() << why;
    rootfs_ = ensure_bookworm_rootfs();
    if (rootfs_.path.empty()) {
      if (rootfs_.download_failed) GTEST_SKIP() << rootfs_.unavailable;
      FAIL() << rootfs_.unavailable;
    }
    systemd_ = std::make_unique<NspawnSystemd>(rootfs_.path, GetParam());
    ASSERT_TRUE(systemd_->ok()) << systemd_->error();

    // The node's GPU files: /proc/devices, the GPU's information file, device nodes.
    files_.write("proc/devices", "Character devices:\n195 nvidia\n195 nvidiactl\n237 nvidia-uvm\n\nBlock devices:\n");
    files_.write("proc/driver/nvidia/gpus/0000:0f:00.0/information",
                 std::string("GPU UUID: \t ") + kGpu + "\nDevice Minor: \t 0\n");
    files_.mkdirs("dev");
    for (auto [name, major, minor] : {std::tuple{"nvidia0", 195u, 0u}, {"nvidia1", 195u, 1u}, {"nvidiactl", 195u, 255u},
                                      {"nvidia-uvm", 237u, 0u}, {"nvidia-uvm-tools", 237u, 1u}})
      ASSERT_EQ(::mknod((files_ / "dev/" + name).c_str(), S_IFCHR | 0666, makedev(major, minor)), 0);

    pod_uid_ = random_uuid();
    id_ = random_hex(64);
    unit_ = "cri-containerd-" + id_ + ".scope";
    std::string pod_part = pod_uid_;
    std::replace(pod_part.begin(), pod_part.end(), '-', '_');
    std::string why;
    pid_t pid = systemd_->start_scope(unit_, "kubepods-burstable-pod" + pod_part + ".slice",
                                      {"DevicePolicy=strict", "DeviceAllow=/dev/char/1:3 rwm"},
                                      {"/bin/sleep", "100000"}, &why);
    ASSERT_GT(pid, 0) << why;
    cgroup_ = systemd_->device_cgroup_of(pid);
    ASSERT_FALSE(cgroup_.empty());

    // The OCI bundle and kubelet's allocation record for it.
    nlohmann::json spec = {
        {"annotations",
         {{"io.kubernetes.cri.container-type", "container"}, {"io.kubernetes.cri.container-name", "cuda"},
          {"io.kubernetes.cri.sandbox-name", "cuda-0"}, {"io.kubernetes.cri.sandbox-namespace", "ml"},
          {"io.kubernetes.cri.sandbox-uid", pod_uid_}}},
        {"linux",
         {{"cgroupsPath", "kubepods-burstable-pod" + pod_part + ".slice:cri-containerd:" + id_},
          {"resources",
           {{"devices", {{{"allow", false}, {"access", "rwm"}},
                         {{"allow", true}, {"type", "c"}, {"major", 1}, {"minor", 3}, {"access", "rwm"}}}}}}}}};
    files_.write("run/" + id_ + "/config.json", spec.dump());
    files_.write("kubelet/kubelet_internal_checkpoint", one_gpu_checkpoint(pod_uid_, "cuda", kGpu));
  }

  std::string config(int port) {
    const bool v2 = GetParam() == CgroupMode::kV2;
    const std::string hierarchy = v2 ? "/sys/fs/cgroup/unified/" : "/sys/fs/cgroup/devices/";
    const std::string kubepods = cgroup_.substr(hierarchy.size(), cgroup_.find("/kubepods.slice") + 15 - hierarchy.size());
    return files_.write("config.yaml",
                        std::string("cgroup:\n  root: /sys/fs/cgroup\n  version: ") + (v2 ? "v2" : "v1") +
                            "\n  kubepods: " + kubepods + "\nkubelet:\n  checkpoint: " + files_ / "kubelet/kubelet_internal_checkpoint" +
                            "\n  device_plugins_dir: " + files_ / "kubelet" + "\n  pod_resources_socket: " + files_ / "none.sock" +
                            "\nruntime:\n  state_dirs: [" + files_ / "run" + "]\ndevices:\n  dev_root: " + files_ / "dev" +
                            "\n  proc_root: " + files_ / "proc" + "\nsystemd:\n  bus_address: " + systemd_->bus_address() +
                            "\nmetrics:\n  listen: 127.0.0.1:" + std::to_string(port) +
                            "\nprobe:\n  enabled: true\ndaemon:\n  program_query_interval: 300ms\nlog:\n  level: debug\n");
  }

  int open_errno(const std::string& node) { return open_errno_in_cgroup(cgroup_, files_ / "dev/" + node); }
  bool eventually_open(const std::string& node, int want) {
    return eventually([&] { return open_errno(node) == want; }, std::chrono::seconds(5));
  }
  void daemon_reload() {
    auto r = systemd_->run_inside({"systemctl", "daemon-reload"});
    ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
  }

  BookwormRootfs rootfs_;
  std::unique_ptr<NspawnSystemd> systemd_;
  TempDir files_{"gdw-systemd-node"};
  std::string pod_uid_, id_, unit_, cgroup_;
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
      ASSERT_EQ(write_kernel_file(cgroup_ + "/devices.allow", rule), 0);
  } else {
    auto hook = repair_device_programs(cgroup_, all);
    ASSERT_TRUE(hook.ok()) << hook.error().message;
  }
  ASSERT_EQ(open_errno("nvidia0"), ENXIO);

  const int port = free_port();
  BackgroundProcess daemon({GDW_BINARY, "run", "--config", config(port)});
  ASSERT_TRUE(daemon.wait_for_output(" ready")) << daemon.output();
  EXPECT_EQ(metric_value(http_get(port), "gpu_devwatch_containers_watched"), 1) << daemon.output();

  daemon_reload();  // systemd re-applies DeviceAllow=: the GPU is gone, the daemon grants it back
  EXPECT_TRUE(eventually_open("nvidia0", ENXIO)) << daemon.output();
  EXPECT_TRUE(eventually_open("nvidia-uvm", ENXIO)) << daemon.output();
  EXPECT_TRUE(daemon.wait_for_output("systemd now allows")) << daemon.output();
  const std::string direct = GetParam() == CgroupMode::kV1 ? "cgroupfs" : "bpf";
  EXPECT_GE(metric_value(http_get(port), "gpu_devwatch_regrants_total", {{"method", direct}, {"result", "success"}})
                .value_or(0),
            1)
      << "the reload revoked and the daemon granted directly first";
  EXPECT_GE(metric_value(http_get(port), "gpu_devwatch_regrants_total", {{"method", "systemd"}, {"result", "success"}})
                .value_or(0),
            1);
  const std::string drop_in = read_file(systemd_->root_path("/run/systemd/transient/" + unit_ + ".d/50-DeviceAllow.conf"));
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
