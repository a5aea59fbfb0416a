// crun (Debian 1.8.1) with the systemd cgroup driver under a real systemd 252 booted in
// systemd-nspawn (test/support/nspawn_systemd.h): crun asks systemd for the scope
// kubepods.slice/kubepods-burstable.slice/<pod slice>/cri-containerd-<id>.scope. On cgroup
// v2 it moves the container's processes into `<scope>/container` and attaches its device
// program there, none on the scope (the scope keeps DevicePolicy=auto); on v1 the scope is
// the container's cgroup. The spec lacks the GPU: the daemon and `check --repair` find the
// layout and grant it, proven with open() through `crun exec` inside the nspawn container.
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>

#include <cerrno>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "backend/device_programs_v2.h"
#include "support/cgroup_sandbox.h"
#include "support/nspawn_systemd.h"
#include "support/process.h"
#include "support/runc_container.h"
#include "support/sandbox_node.h"

namespace gdw::test {
namespace {

constexpr const char* kGpu = "GPU-2f815c32-768d-d782-1073-db01d7b90215";

enum class Repairer { kDaemon, kCheck };
struct Case {
  CgroupMode mode;
  Repairer repairer;
};
std::string name_of(const ::testing::TestParamInfo<Case>& info) {
  return to_string(info.param.mode) + (info.param.repairer == Repairer::kDaemon ? "Daemon" : "CheckRepair");
}

const std::vector<OciDeviceNode> kNodes{{"/gpu/nvidia0", 195, 0}, {"/gpu/nvidiactl", 195, 255},
                                        {"/gpu/nvidia1", 195, 1}, {"/gpu/nvidia-uvm", 237, 0},
                                        {"/gpu/tun", 10, 200},     {"/gpu/pts9", 136, 9},
                                        {"/gpu/console", 5, 1}};

std::vector<pid_t> children_of(pid_t pid) {
  std::vector<pid_t> kids;
  std::ifstream in("/proc/" + std::to_string(pid) + "/task/" + std::to_string(pid) + "/children");
  pid_t kid = 0;
  while (in >> kid) kids.push_back(kid);
  return kids;
}

class CrunSystemd : public ::testing::TestWithParam<Case> {
 protected:
  void SetUp() override {
    const CgroupMode mode = GetParam().mode;
    if (auto why = NspawnSystemd::unavailable_reason(mode); !why.empty()) GTEST_SKIP() << why;
    if (!OciContainer::available(OciRuntime::kCrun)) GTEST_SKIP() << "needs crun and busybox-static";
    rootfs_ = ensure_bookworm_rootfs({"crun"});
    if (rootfs_.path.empty()) {
      if (rootfs_.download_failed) GTEST_SKIP() << rootfs_.unavailable;
      FAIL() << rootfs_.unavailable;
    }
    systemd_ = std::make_unique<NspawnSystemd>(rootfs_.path, mode);
    ASSERT_TRUE(systemd_->ok()) << systemd_->error();

    files_.write("proc/devices", "Character devices:\n195 nvidia\n195 nvidiactl\n237 nvidia-uvm\n\nBlock devices:\n");
    files_.write("proc/driver/nvidia/gpus/0000:0f:00.0/information",
                 std::string("GPU UUID: \t ") + kGpu + "\nDevice Minor: \t 0\n");
    files_.mkdirs("dev");
    for (const auto& n : kNodes) {
      const std::string path = files_ / ("dev" + n.path.substr(4));
      ASSERT_EQ(::mknod(path.c_str(), S_IFCHR | 0666, makedev(n.major, n.minor)), 0) << path;
    }
    // The shim and the bundle live in the nspawn container's (volatile) file system.
    std::filesystem::copy_file(GDW_MEMLOCK_SHIM, systemd_->root_path("/tmp/gdw-memlock-shim.so"));
    pod_uid_ = random_uuid();
    id_ = random_hex(64);
    std::string pod_part = pod_uid_;
    std::replace(pod_part.begin(), pod_part.end(), '-', '_');
    std::vector<std::string> wrapper = {"nsenter", "-t", std::to_string(systemd_->leader()), "-a"};
    if (mode == CgroupMode::kV1) {
      auto v1_only = cgroup_v1_only_wrapper();
      wrapper.insert(wrapper.end(), v1_only.begin(), v1_only.end());
    }
    container_ = std::make_unique<OciContainer>(OciContainer::Options{
        .id = id_,
        .bundle_dir = systemd_->root_path("/run/gdw-bundles/" + id_),
        .cgroups_path = "kubepods-burstable-pod" + pod_part + ".slice:cri-containerd:" + id_,
        .annotations = {{"io.kubernetes.cri.container-type", "container"},
                        {"io.kubernetes.cri.container-name", "cuda"},
                        {"io.kubernetes.cri.sandbox-name", "cuda-0"},
                        {"io.kubernetes.cri.sandbox-namespace", "ml"},
                        {"io.kubernetes.cri.sandbox-uid", pod_uid_}},
        .allow = {{"c", 195, 255, "rw"}},  // nvidiactl only: the GPU was never granted
        .nodes = kNodes,
        .wrapper = wrapper,
        .runtime = OciRuntime::kCrun,
        .systemd_cgroup = true,
        .runtime_bundle_dir = "/run/gdw-bundles/" + id_,
        .runtime_state_dir = "/run/gdw-crun",
        .memlock_shim = "/tmp/gdw-memlock-shim.so",
    });
    ASSERT_TRUE(container_->running()) << container_->start_error();
    // The container's process was reparented to the nspawn container's systemd.
    const std::string scope = "/cri-containerd-" + id_ + ".scope";
    ASSERT_TRUE(eventually([&] {
      for (pid_t kid : children_of(systemd_->leader())) {
        std::string cg = systemd_->device_cgroup_of(kid);
        if (cg.find(scope) != std::string::npos) process_cgroup_ = cg;
      }
      return !process_cgroup_.empty();
    }, std::chrono::seconds(5)));
    scope_dir_ = process_cgroup_.substr(0, process_cgroup_.find(scope) + scope.size());

    files_.write("kubelet/kubelet_internal_checkpoint", one_gpu_checkpoint(pod_uid_, "cuda", kGpu));
    for (const auto& n : kNodes) before_[n.path] = container_->open_errno(n.path);
  }

  void TearDown() override {
    container_.reset();  // inside the nspawn container: before it goes
    systemd_.reset();
  }

  std::string config(int port) {
    const bool v2 = GetParam().mode == CgroupMode::kV2;
    const std::string hierarchy = v2 ? "/sys/fs/cgroup/unified/" : "/sys/fs/cgroup/devices/";
    const std::string kubepods =
        scope_dir_.substr(hierarchy.size(), scope_dir_.find("/kubepods.slice") + 15 - hierarchy.size());
    return files_.write(
        "config.yaml",
        std::string("cgroup:\n  root: /sys/fs/cgroup\n  version: ") + (v2 ? "v2" : "v1") + "\n  kubepods: " + kubepods +
            "\nkubelet:\n  checkpoint: " + files_ / "kubelet/kubelet_internal_checkpoint" +
            "\n  device_plugins_dir: " + files_ / "kubelet" + "\n  pod_resources_socket: " + files_ / "none.sock" +
            "\nruntime:\n  state_dirs: [" + systemd_->root_path("/run/gdw-bundles") + "]\ndevices:\n  dev_root: " +
            files_ / "dev" + "\n  proc_root: " + files_ / "proc" + "\nsystemd:\n  bus_address: " +
            systemd_->bus_address() + "\n  unit_dirs: [" + systemd_->root_path("/run/systemd/system.control") + ", " +
            systemd_->root_path("/run/systemd/transient") + "]" + "\nmetrics:\n  listen: 127.0.0.1:" + std::to_string(port) +
            "\ndaemon:\n  program_query_interval: 300ms\nlog:\n  level: debug\n");
  }

  int open_errno(const std::string& path) { return container_->open_errno(path); }

  BookwormRootfs rootfs_;
  std::unique_ptr<NspawnSystemd> systemd_;
  std::unique_ptr<OciContainer> container_;
  TempDir files_{"gdw-crun-systemd"};
  std::string pod_uid_, id_, scope_dir_, process_cgroup_;
  std::map<std::string, int> before_;
};

TEST_P(CrunSystemd, TheScopeLayoutIsFoundAndTheGpuGranted) {
  const bool v2 = GetParam().mode == CgroupMode::kV2;
  // crun's layout under systemd, as observed.
  EXPECT_EQ(process_cgroup_, v2 ? scope_dir_ + "/container" : scope_dir_);
  if (v2) {
    auto programs = query_device_programs(scope_dir_);
    ASSERT_TRUE(programs.ok()) << programs.error().message;
    ASSERT_EQ(programs->size(), 1u) << "crun's program only, on <scope>/container";
    EXPECT_EQ((*programs)[0].subgroup, "container");
    EXPECT_EQ((*programs)[0].owner, ProgramOwner::kRuntime);
  }
  auto policy = systemd_->run_inside({"systemctl", "show", "-p", "DevicePolicy", "-p", "DeviceAllow",
                                      "cri-containerd-" + id_ + ".scope"});
  std::cout << "[   info   ] crun's scope: " << policy.out;
  ASSERT_EQ(before_["/gpu/nvidia0"], EPERM) << "crun applied a spec without the GPU";
  ASSERT_EQ(before_["/gpu/nvidiactl"], ENXIO);
  ASSERT_EQ(before_["/gpu/tun"], EPERM);

  const int port = free_port();
  const std::string cfg = config(port);
  std::unique_ptr<BackgroundProcess> daemon;
  if (GetParam().repairer == Repairer::kCheck) {
    auto before = run_command({GDW_BINARY, "check", "--config", cfg});
    EXPECT_EQ(before.exit_code, 1) << before.out << before.err;
    EXPECT_NE(before.out.find("ml/cuda-0/cuda"), std::string::npos) << before.out << before.err;
    auto repair = run_command({GDW_BINARY, "check", "--repair", "--config", cfg});
    EXPECT_EQ(repair.exit_code, 0) << repair.out << repair.err;
    EXPECT_EQ(open_errno("/gpu/nvidia0"), ENXIO) << repair.out << repair.err;
  } else {
    daemon = std::make_unique<BackgroundProcess>(std::vector<std::string>{GDW_BINARY, "run", "--config", cfg});
    ASSERT_TRUE(daemon->wait_for_output(" ready")) << daemon->output();
    EXPECT_TRUE(eventually([&] { return open_errno("/gpu/nvidia0") == ENXIO; }, std::chrono::seconds(10)))
        << daemon->output();
    // Let a systemd step (DeviceAllow= on the scope) happen before looking at the rest.
    daemon->wait_for_output("systemd now allows", std::chrono::seconds(3));
  }
  EXPECT_EQ(open_errno("/gpu/nvidia-uvm"), ENXIO);
  EXPECT_EQ(open_errno("/gpu/nvidia1"), EPERM) << "not allocated";
  for (const char* path : {"/gpu/nvidiactl", "/gpu/tun", "/gpu/pts9"})
    EXPECT_EQ(open_errno(path), before_[path]) << path << " decided as crun decided it";
  // crun's scope has DevicePolicy=auto and no DeviceAllow=: systemd enforces nothing on it,
  // and a DeviceAllow= added to it makes systemd attach a program allowing only its
  // pseudo devices and the list, which denies what crun allows beyond them (/dev/console).
  // So the grant is not persisted there (read from the scope's unit files, systemd.unit_dirs).
  if (daemon) {
    EXPECT_EQ(daemon->output().find("systemd now allows"), std::string::npos) << daemon->output();
  }
  EXPECT_EQ(open_errno("/gpu/console"), before_["/gpu/console"])
      << "the systemd step narrowed the container" << (daemon ? "\n" + daemon->output() : std::string());
  if (daemon) {
    daemon->signal(SIGTERM);
    EXPECT_EQ(daemon->wait(std::chrono::seconds(10)), 0);
  }
}

INSTANTIATE_TEST_SUITE_P(Crun, CrunSystemd,
                         // v1 is not here: crun entered with nsenter sees its own v1 cgroups
                         // outside the nspawn container's cgroup namespace ("../container").
                         ::testing::Values(Case{CgroupMode::kV2, Repairer::kDaemon},
                                           Case{CgroupMode::kV2, Repairer::kCheck}),
                         name_of);

}  // namespace
}  // namespace gdw::test
