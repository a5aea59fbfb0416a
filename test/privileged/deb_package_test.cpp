// The Debian package (`cpack -G DEB`) installed with dpkg into a real systemd 252 (Debian
// bookworm booted in systemd-nspawn, cgroup v1) whose root file system has the package's
// Depends: installed by debootstrap (the container has no network). `systemctl start
// gpu-devwatch` returns once the Type=notify unit sent READY=1; then a kubepods-style scope's
// GPU is revoked by `systemctl daemon-reload` and the packaged daemon grants it back, proven
// by open() from inside the scope's cgroup.
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>

#include <algorithm>
#include <cerrno>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <sstream>

#include "support/cgroup_sandbox.h"
#include "support/nspawn_systemd.h"
#include "support/process.h"
#include "support/sandbox_node.h"

namespace gdw::test {
namespace {
namespace fs = std::filesystem;

constexpr const char* kGpu = "GPU-6a1f0e43-7f1c-4d2b-9d3e-0c8b5a2f4e11";
constexpr const char* kNode = "/var/lib/gdw-node";  // the node's fixture files, inside

// "libc6 (>= 2.34), libbpf1 (>= 1:0.6.0), a | b" -> {"libc6", "libbpf1", "a"}
std::vector<std::string> package_names(const std::string& depends) {
  std::vector<std::string> names;
  std::istringstream in(depends);
  std::string entry;
  while (std::getline(in, entry, ',')) {
    entry = entry.substr(0, entry.find('|'));
    std::istringstream words(entry);
    std::string name;
    if (words >> name) names.push_back(name);
  }
  return names;
}

// debootstrap installs only real packages: a virtual one (libspdlog1.10-fmt9) is replaced by
// the installed package that provides it (this host has them all: it built the binary).
std::vector<std::string> real_packages(const std::vector<std::string>& names) {
  const auto provided = run_command({"dpkg-query", "-W", "-f=${Package}\t${Provides}\n"});
  std::vector<std::string> real;
  for (const auto& name : names) {
    std::string replacement = name;
    std::istringstream lines(provided.out);
    std::string line;
    bool is_real = false;
    while (std::getline(lines, line)) {
      const std::string package = line.substr(0, line.find('\t'));
      if (package == name) is_real = true;
      std::istringstream provides(line.substr(line.find('\t') + 1));
      std::string entry;
      while (std::getline(provides, entry, ',')) {
        std::istringstream words(entry);
        std::string provided_name;
        if (words >> provided_name && provided_name == name) replacement = package;
      }
    }
    real.push_back(is_real ? name : replacement);
  }
  return real;
}

class DebPackage : public ::testing::Test {
 protected:
  void SetUp() override {
    if (auto why = NspawnSystemd::unavailable_reason(CgroupMode::kV1); !why.empty()) GTEST_SKIP() << why;
    auto packed = run_command({"cpack", "-G", "DEB", "--config", std::string(GDW_BUILD_DIR) + "/CPackConfig.cmake",
                               "-B", out_.path()},
                              180s);
    ASSERT_EQ(packed.exit_code, 0) << packed.out << packed.err;
    for (const auto& e : fs::directory_iterator(out_.path()))
      if (e.path().extension() == ".deb") deb_ = e.path();
    ASSERT_FALSE(deb_.empty()) << packed.out;
    auto depends = run_command({"dpkg-deb", "-f", deb_, "Depends"});
    ASSERT_EQ(depends.exit_code, 0) << depends.err;
    depends_ = real_packages(package_names(depends.out));
    ASSERT_FALSE(depends_.empty()) << "dpkg-shlibdeps found no dependencies";

    rootfs_ = ensure_bookworm_rootfs(depends_);
    if (rootfs_.path.empty()) {
      if (rootfs_.download_failed) GTEST_SKIP() << rootfs_.unavailable;
      FAIL() << rootfs_.unavailable;
    }
    systemd_ = std::make_unique<NspawnSystemd>(rootfs_.path, CgroupMode::kV1);
    ASSERT_TRUE(systemd_->ok()) << systemd_->error();
  }

  CommandResult inside(const std::vector<std::string>& argv, std::chrono::milliseconds timeout = 60s) {
    return systemd_->run_inside(argv, timeout);
  }
  std::string in_root(const std::string& path) { return systemd_->root_path(path); }

  // The node as the daemon inside sees it (GPU files, bundle, checkpoint) and, on the host,
  // device nodes to open from the scope's cgroup. Returns the scope's host cgroup.
  std::string make_gpu_scope(const std::string& pod_uid, const std::string& id) {
    const std::string node = in_root(kNode);
    write_file_mkdirs(node + "/proc/devices",
                      "Character devices:\n195 nvidia\n195 nvidiactl\n237 nvidia-uvm\n\nBlock devices:\n");
    write_file_mkdirs(node + "/proc/driver/nvidia/gpus/0000:0f:00.0/information",
                      std::string("GPU UUID: \t ") + kGpu + "\nDevice Minor: \t 0\n");
    fs::create_directories(node + "/dev");
    for (const std::string& dev : {node + "/dev", host_.path()}) {
      for (auto [name, major, minor] : {std::tuple{"nvidia0", 195u, 0u}, {"nvidia1", 195u, 1u},
                                        {"nvidiactl", 195u, 255u}, {"nvidia-uvm", 237u, 0u}})
        EXPECT_EQ(::mknod((dev + "/" + name).c_str(), S_IFCHR | 0666, makedev(major, minor)), 0) << dev;
    }
    std::string pod_part = pod_uid;
    std::replace(pod_part.begin(), pod_part.end(), '-', '_');
    std::string why;
    pid_t pid = systemd_->start_scope("cri-containerd-" + id, "kubepods-burstable-pod" + pod_part + ".slice",
                                      {"DevicePolicy=strict", "DeviceAllow=/dev/char/1:3 rwm"},
                                      {"/bin/sleep", "100000"}, &why);
    EXPECT_GT(pid, 0) << why;
    nlohmann::json spec = {
        {"annotations",
         {{"io.kubernetes.cri.container-type", "container"}, {"io.kubernetes.cri.container-name", "cuda"},
          {"io.kubernetes.cri.sandbox-name", "cuda-0"}, {"io.kubernetes.cri.sandbox-namespace", "ml"},
          {"io.kubernetes.cri.sandbox-uid", pod_uid}}},
        {"linux",
         {{"cgroupsPath", "kubepods-burstable-pod" + pod_part + ".slice:cri-containerd:" + id},
          {"resources",
           {{"devices", {{{"allow", false}, {"access", "rwm"}},
                         {{"allow", true}, {"type", "c"}, {"major", 1}, {"minor", 3}, {"access", "rwm"}}}}}}}}};
    write_file_mkdirs(node + "/run/" + id + "/config.json", spec.dump());
    write_file_mkdirs(node + "/kubelet/device-plugins/kubelet_internal_checkpoint",
                      one_gpu_checkpoint(pod_uid, "cuda", kGpu));
    return pid > 0 ? systemd_->device_cgroup_of(pid) : std::string();
  }

  static void write_file_mkdirs(const std::string& path, const std::string& content) {
    fs::create_directories(fs::path(path).parent_path());
    write_file(path, content);
  }

  TempDir out_{"gdw-deb"};
  TempDir host_{"gdw-deb-dev"};
  std::string deb_;
  std::vector<std::string> depends_;
  BookwormRootfs rootfs_;
  std::unique_ptr<NspawnSystemd> systemd_;
};

TEST_F(DebPackage, InstallsStartsReadyUnderSystemdAndRepairs) {
  fs::copy_file(deb_, in_root("/root/gpu-devwatch.deb"));
  auto installed = inside({"dpkg", "-i", "/root/gpu-devwatch.deb"}, 120s);
  ASSERT_EQ(installed.exit_code, 0) << installed.out << installed.err;
  auto listed = inside({"dpkg", "-L", "gpu-devwatch"});
  for (const char* path : {"/usr/bin/gpu-devwatch", "/etc/gpu-devwatch/gpu-devwatch.yaml",
                           "/usr/lib/systemd/system/gpu-devwatch.service",
                           "/usr/share/gpu-devwatch/prometheus/gpu-devwatch-rules.yaml"})
    EXPECT_NE(listed.out.find(std::string(path) + "\n"), std::string::npos) << path << " not in\n" << listed.out;
  auto conffiles = inside({"dpkg-query", "-W", "-f=${Conffiles}", "gpu-devwatch"});
  EXPECT_NE(conffiles.out.find("/etc/gpu-devwatch/gpu-devwatch.yaml"), std::string::npos) << conffiles.out;
  auto exec_start = inside({"systemctl", "show", "-p", "ExecStart", "--value", "gpu-devwatch"});
  EXPECT_NE(exec_start.out.find("path=/usr/bin/gpu-devwatch"), std::string::npos) << exec_start.out;
  EXPECT_TRUE(read_file(in_root("/etc/gpu-devwatch/gpu-devwatch.yaml")) ==
              read_file(std::string(GDW_SOURCE_DIR) + "/config/gpu-devwatch.yaml"))
      << "the packaged configuration is not config/gpu-devwatch.yaml";

  const std::string pod_uid = random_uuid(), id = random_hex(64);
  const std::string cgroup = make_gpu_scope(pod_uid, id);
  ASSERT_FALSE(cgroup.empty());
  // The runtime hook grants the GPU and its control nodes behind systemd's back.
  for (const char* rule : {"c 195:0 rw", "c 195:255 rw", "c 237:0 rw"})
    ASSERT_EQ(write_kernel_file(cgroup + "/devices.allow", rule), 0);
  auto open_errno = [&](const char* name) { return open_errno_in_cgroup(cgroup, host_ / name); };
  ASSERT_EQ(open_errno("nvidia0"), ENXIO);

  // What an operator edits: the conffile. kubelet.root_dir moves every kubelet path.
  // No probe: nspawn gives the container no CAP_BPF in v1 mode.
  const std::string node = kNode;
  write_file(in_root("/etc/gpu-devwatch/gpu-devwatch.yaml"),
             "cgroup:\n  version: v1\n  kubepods: kubepods.slice\nkubelet:\n  root_dir: " + node +
                 "/kubelet\nruntime:\n  state_dirs: [" + node + "/run]\ndevices:\n  dev_root: " + node +
                 "/dev\n  proc_root: " + node + "/proc\n  nvml_library: /nonexistent/libnvidia-ml.so.1\n"
                 "probe:\n  enabled: false\ndaemon:\n  resync_interval: 2s\nlog:\n  level: debug\n");
  auto started = inside({"systemctl", "start", "gpu-devwatch"}, 60s);
  auto journal = [&] { return inside({"journalctl", "-u", "gpu-devwatch", "--no-pager", "-o", "cat"}).out; };
  ASSERT_EQ(started.exit_code, 0) << started.out << started.err << journal();
  auto state = inside({"systemctl", "show", "-p", "ActiveState", "-p", "SubState", "gpu-devwatch"});
  EXPECT_EQ(state.out, "ActiveState=active\nSubState=running\n") << journal();
  // READY=1 is what `systemctl start` waits for; the log line comes after it, through the
  // daemon's log writer and journald (once seen in CI not yet in the journal at this point).
  EXPECT_TRUE(eventually([&] { return journal().find("\nready\n") != std::string::npos; }, 10s)) << journal();

  // The hook's grants are not in the scope's DeviceAllow=: the daemon grants what the first
  // re-apply took (nvidia-uvm-tools was never granted) and has systemd keep all of it.
  EXPECT_TRUE(eventually([&] { return journal().find("granted back nvidia-uvm-tools") != std::string::npos; }, 10s))
      << journal();
  EXPECT_TRUE(eventually([&] { return journal().find("systemd now allows nvidia0") != std::string::npos; }, 10s))
      << journal();
  // systemd re-applies DeviceAllow= (deny `a`, then its list): the GPU is back at once, by
  // systemd itself or, if the daemon looked in between, by the daemon.
  auto reload = inside({"systemctl", "daemon-reload"});
  ASSERT_EQ(reload.exit_code, 0) << reload.err;
  EXPECT_TRUE(eventually([&] { return open_errno("nvidia0") == ENXIO; }, 10s)) << journal();
  EXPECT_EQ(open_errno("nvidia-uvm"), ENXIO) << journal();
  EXPECT_EQ(open_errno("nvidia1"), EPERM) << "never more than the allocation";

  // Removal stops the daemon; purge removes the conffile.
  auto purged = inside({"dpkg", "--purge", "gpu-devwatch"}, 60s);
  EXPECT_EQ(purged.exit_code, 0) << purged.out << purged.err;
  EXPECT_NE(inside({"systemctl", "is-active", "gpu-devwatch"}).out, "active\n");
  EXPECT_FALSE(fs::exists(in_root("/etc/gpu-devwatch/gpu-devwatch.yaml")));
}

// The arm64 package of the cross-build (`cpack -G DEB` in build-arm64): named and marked
// arm64, an AArch64 binary, Depends: found by dpkg-shlibdeps among Debian's :arm64
// libraries (each one installed here for arm64), and the packaged binary runs (under
// qemu-user, through binfmt_misc) and says its version.
TEST(DebPackageArm64, IsAnArm64PackageWhoseBinaryRuns) {
#ifndef GDW_ARM64_BUILD_DIR
  GTEST_SKIP() << "not an amd64 build: no arm64 cross-build to package";
#else
  const std::string build = GDW_ARM64_BUILD_DIR;
  if (!fs::exists(build + "/CPackConfig.cmake") || !fs::exists(build + "/daemon/gpu-devwatch"))
    GTEST_SKIP() << "no arm64 build in " << build << ": scripts/build.sh --arch arm64 (scripts/test.sh builds it)";
  TempDir out("gdw-deb-arm64");
  auto packed = run_command({"cpack", "-G", "DEB", "--config", build + "/CPackConfig.cmake", "-B", out.path()}, 180s);
  ASSERT_EQ(packed.exit_code, 0) << packed.out << packed.err;
  std::string deb;
  for (const auto& e : fs::directory_iterator(out.path()))
    if (e.path().extension() == ".deb") deb = e.path();
  ASSERT_FALSE(deb.empty()) << packed.out;
  EXPECT_TRUE(deb.ends_with("_arm64.deb")) << deb;
  EXPECT_EQ(run_command({"dpkg-deb", "-f", deb, "Architecture"}).out, "arm64\n");

  auto depends = run_command({"dpkg-deb", "-f", deb, "Depends"});
  const auto names = real_packages(package_names(depends.out));
  EXPECT_NE(std::find(names.begin(), names.end(), "libbpf1"), names.end()) << depends.out;
  for (const auto& name : names) {
    auto status = run_command({"dpkg-query", "-W", "-f=${Status}", name + ":arm64"});
    EXPECT_EQ(status.out, "install ok installed") << name << ":arm64 (Depends: " << depends.out << ")";
  }

  const std::string root = out / "root";
  ASSERT_EQ(run_command({"dpkg-deb", "-x", deb, root}).exit_code, 0);
  auto header = run_command({"readelf", "-h", root + "/usr/bin/gpu-devwatch"});
  EXPECT_NE(header.out.find("AArch64"), std::string::npos) << header.out;
  auto ran = run_command({root + "/usr/bin/gpu-devwatch", "--version"}, 60s);
  EXPECT_EQ(ran.exit_code, 0) << ran.err;
  EXPECT_EQ(ran.out, run_command({build + "/daemon/gpu-devwatch", "version"}).out);
#endif
}

}  // namespace
}  // namespace gdw::test
