// The daemon-reload incident on a real NVIDIA GPU on cgroup v2, end to end, as a user sees
// it (issue 23, goal 3). Runs only where an NVIDIA driver is present (a GPU under
// /proc/driver/nvidia/gpus, `nvidia-smi -L` works) and python3 can import torch; skips
// otherwise (CI has no GPU). Never changes a GPU setting.
//
// Under a unique parent in the cgroup2 hierarchy (kubepods/burstable/pod<uid>/<id>):
//   - a GPU pod whose runtime program allows the spec plus the GPU and its control nodes, as
//     libnvidia-container leaves it: from a new process inside, `nvidia-smi -L` lists the
//     GPU and a CUDA matmul runs;
//   - systemd's daemon-reload: a spec-only program ANDed on. nvidia-smi fails with "Failed to
//     initialize NVML: Unknown Error", torch says "No CUDA GPUs are available";
//   - `gpu-devwatch run` (default configuration, pointed at this tree, a kubelet checkpoint
//     allocating the real GPU's UUID, the pods' runtime bundles): nvidia-smi and CUDA work
//     again from new processes, nothing restarted;
//   - a runc-style re-apply (the old programs replaced by a spec-only one) while a CUDA
//     process keeps computing on the GPU: repaired again, and that process never stopped;
//   - a pod without a GPU allocation: its GPU node stays denied throughout.
//
// On a GPU machine, from the bundle scripts/gpu-bundle.sh builds:
//   mkdir -p /tmp/gdwb && tar xzf .gpubundle.tgz -C /tmp/gdwb && /tmp/gdwb/gpu_real_gpu_test
// GDW_GPU_DAEMON names the daemon binary (default: gpu-devwatch beside this test, else this
// build's), GDW_GPU_PYTHON the Python with torch (default: python3).
#include <gtest/gtest.h>
#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <memory>
#include <nlohmann/json.hpp>

#include "core/device_rule.h"
#include "reappliers.h"
#include "real_gpu_host.h"
#include "support/cgroup_sandbox.h"
#include "support/foreign_device_program.h"
#include "support/metrics_text.h"
#include "support/process.h"
#include "support/sandbox_node.h"

namespace gdw::test {
namespace {

// A CUDA call as a user makes one; CUDA init takes 5–8 s per process.
constexpr const char* kCudaMatmul = R"(import torch
x = torch.randn(512, 512, device="cuda")
s = (x @ x).sum().item()
torch.cuda.synchronize()
print("cuda ok:", torch.cuda.get_device_name(0))
)";

// Keeps computing on the GPU (its device nodes open) until the file argv[1] exists.
constexpr const char* kKeepComputing = R"(import os, sys, time, torch
x = torch.randn(1024, 1024, device="cuda")
torch.cuda.synchronize()
print("computing", flush=True)
n, end = 0, time.time() + 240
while not os.path.exists(sys.argv[1]) and time.time() < end:
    y = x @ x
    torch.cuda.synchronize()
    n += 1
    time.sleep(0.01)
print("still computing after", n, "matmuls", flush=True)
)";

std::string env_or(const char* name, const std::string& fallback) {
  const char* v = std::getenv(name);
  return v && *v ? v : fallback;
}

std::string daemon_binary() {
  std::error_code ec;
  const auto beside = std::filesystem::read_symlink("/proc/self/exe", ec).parent_path() / "gpu-devwatch";
  return env_or("GDW_GPU_DAEMON", std::filesystem::exists(beside, ec) ? beside.string() : GDW_BINARY);
}

struct Pod {
  std::string uid, id, rel, dir;
};

class RealGpuIncident : public ::testing::Test {
 protected:
  void SetUp() override {
    if (::geteuid() != 0) GTEST_SKIP() << "needs root";
    gpu_ = find_real_gpu();
    if (!gpu_.why_not.empty()) GTEST_SKIP() << gpu_.why_not;
    auto smi = run_command({"nvidia-smi", "-L"}, 60s);
    if (smi.exit_code != 0) GTEST_SKIP() << "nvidia-smi -L does not run here: " << smi.out << smi.err;
    if (run_command({python_, "-c", "import torch"}, 120s).exit_code != 0)
      GTEST_SKIP() << python_ << " cannot import torch";
    // Our reading of the numbers must be the kernel's.
    ASSERT_EQ(rdev_of(gpu_.gpu.path), std::to_string(gpu_.gpu.major) + ":" + std::to_string(gpu_.gpu.minor));
    for (const auto& n : gpu_.control) ASSERT_EQ(rdev_of(n.path), std::to_string(n.major) + ":" + std::to_string(n.minor));
    cgroups_ = std::make_unique<CgroupSandbox>(gpu_.cgroup2_name, "gpu", gpu_.cgroup2_parent);
    with_gpu_ = make_pod("cuda", true);
    without_gpu_ = make_pod("cpu-only", false);
    files_.write("kubelet/device-plugins/kubelet_internal_checkpoint", one_gpu_checkpoint(with_gpu_.uid, "cuda", gpu_.uuid));
  }

  void TearDown() override {
    if (daemon_ && daemon_->running()) {
      daemon_->signal(SIGTERM);
      daemon_->wait(10s);
    }
    daemon_.reset();
  }

  // The runtime's program: the spec (runc's defaults), plus the GPU and its control nodes
  // as libnvidia-container grants them on v2.
  std::vector<OciDeviceCgroupRule> runtime_rules(bool with_gpu) const {
    auto rules = SandboxNode::spec_rules();
    if (!with_gpu) return rules;
    rules.push_back({true, {DeviceType::kChar, gpu_.gpu.major, gpu_.gpu.minor, kAccessReadWrite}});
    for (const auto& n : gpu_.control) rules.push_back({true, {DeviceType::kChar, n.major, n.minor, kAccessReadWrite}});
    return rules;
  }

  Pod make_pod(const std::string& container, bool with_gpu) {
    Pod p{random_uuid(), random_hex(64), "", ""};
    p.rel = "kubepods/burstable/pod" + p.uid + "/" + p.id;
    p.dir = cgroups_->make(p.rel);
    files_.write("containerd/" + p.id + "/config.json", bundle_json(p, container, with_gpu));
    ForeignProgram runtime("", runtime_rules(with_gpu));
    if (runtime.fd < 0 || runtime.attach(p.dir) != 0) throw std::runtime_error("cannot attach a program to " + p.dir);
    const pid_t sleeper = cgroups_->add_sleeper(p.rel);
    files_.write("containerd/" + p.id + "/init.pid", std::to_string(sleeper));  // the create has ended
    return p;
  }

  // A containerd bundle with the CRI annotations and the spec's device rules.
  std::string bundle_json(const Pod& p, const std::string& container, bool with_gpu) const {
    nlohmann::json devices = nlohmann::json::array();
    devices.push_back({{"allow", false}, {"access", "rwm"}});
    for (const auto& text : SandboxNode::spec_allow_rules()) {
      const DeviceRule r = *parse_device_rule(text);
      nlohmann::json j = {{"allow", true}, {"type", std::string(1, static_cast<char>(r.type))}, {"access", format_access(r.access)}};
      if (r.major != kAnyNumber) j["major"] = r.major;
      if (r.minor != kAnyNumber) j["minor"] = r.minor;
      devices.push_back(j);
    }
    return nlohmann::json{
        {"ociVersion", "1.0.2-dev"},
        {"process", {{"args", {"/bin/sleep", "infinity"}},
                     {"env", with_gpu ? nlohmann::json{"NVIDIA_VISIBLE_DEVICES=" + gpu_.uuid} : nlohmann::json::array()}}},
        {"annotations", {{"io.kubernetes.cri.container-type", "container"},
                         {"io.kubernetes.cri.container-name", container},
                         {"io.kubernetes.cri.sandbox-id", random_hex(64)},
                         {"io.kubernetes.cri.sandbox-name", container + "-pod"},
                         {"io.kubernetes.cri.sandbox-namespace", "gpu-test"},
                         {"io.kubernetes.cri.sandbox-uid", p.uid}}},
        {"linux", {{"cgroupsPath", "/" + cgroups_->name() + "/" + p.rel}, {"resources", {{"devices", devices}}}}},
    }.dump(2);
  }

  // The daemon's default configuration, pointed at this tree and the real /dev and /proc.
  std::string write_config() {
    port_ = free_port();
    const std::string f = files_.path();
    files_.mkdirs("kubelet/pod-resources");
    return files_.write("gpu-devwatch.yaml",
                        "cgroup:\n  root: /sys/fs/cgroup\n  version: v2\n  kubepods: " + cgroups_->name() +
                            "/kubepods\nkubelet:\n  checkpoint: " + f + "/kubelet/device-plugins/kubelet_internal_checkpoint" +
                            "\n  device_plugins_dir: " + f + "/kubelet/device-plugins\n  pod_resources_socket: " + f +
                            "/kubelet/pod-resources/kubelet.sock\ncdi:\n  spec_dirs: [" + files_.mkdirs("cdi") +
                            "]\nruntime:\n  state_dirs: [" + f + "/containerd]\nmetrics:\n  listen: 127.0.0.1:" +
                            std::to_string(port_) + "\n");
  }

  bool start_daemon() {
    const std::string binary = daemon_binary();
    std::printf("daemon: %s\n", binary.c_str());
    daemon_ = std::make_unique<BackgroundProcess>(std::vector<std::string>{binary, "run", "--config", write_config()});
    return daemon_->wait_for_output(" ready", 60s);
  }
  std::string daemon_log() const { return daemon_ ? "daemon output:\n" + daemon_->output() : "(no daemon)"; }

  // A new process that joins the pod's cgroup (its stdio already open) and execs argv.
  static std::vector<std::string> in_pod(const Pod& p, std::vector<std::string> argv) {
    argv.insert(argv.begin(), {"/bin/sh", "-c", "echo $$ > \"$0/cgroup.procs\" && exec \"$@\"", p.dir});
    return argv;
  }
  CommandResult run_in_pod(const Pod& p, const std::vector<std::string>& argv) {
    return run_command(in_pod(p, argv), 180s);
  }
  // errno of an open() of the node from a new process inside the pod: 0 with the driver
  // behind it; EPERM when the cgroup denies it (the cgroup's check comes before the driver's).
  int open_errno(const Pod& p, const DevNode& n) { return cgroups_->open_errno(p.rel, n.path); }
  bool all_nodes_allowed(const Pod& p) {
    if (open_errno(p, gpu_.gpu) == EPERM) return false;
    for (const auto& n : gpu_.control)
      if (open_errno(p, n) == EPERM) return false;
    return true;
  }

  void expect_gpu_works(const Pod& p, const std::string& when) {
    const auto smi = run_in_pod(p, {"nvidia-smi", "-L"});
    EXPECT_EQ(smi.exit_code, 0) << when << ": nvidia-smi -L\n" << smi.out << smi.err;
    EXPECT_NE(smi.out.find(gpu_.uuid), std::string::npos) << when << ": nvidia-smi -L\n" << smi.out << smi.err;
    const auto cuda = run_in_pod(p, {python_, "-c", kCudaMatmul});
    EXPECT_EQ(cuda.exit_code, 0) << when << ": CUDA matmul\n" << cuda.out << cuda.err;
    EXPECT_NE(cuda.out.find("cuda ok"), std::string::npos) << when << ": CUDA matmul\n" << cuda.out << cuda.err;
  }

  void expect_incident(const Pod& p) {
    EXPECT_EQ(open_errno(p, gpu_.gpu), EPERM);
    const auto smi = run_in_pod(p, {"nvidia-smi", "-L"});
    EXPECT_NE(smi.exit_code, 0) << smi.out << smi.err;
    EXPECT_NE((smi.out + smi.err).find("Failed to initialize NVML: Unknown Error"), std::string::npos) << smi.out << smi.err;
    const auto cuda = run_in_pod(p, {python_, "-c", kCudaMatmul});
    EXPECT_NE(cuda.exit_code, 0) << cuda.out << cuda.err;
    EXPECT_NE((cuda.out + cuda.err).find("No CUDA GPUs are available"), std::string::npos) << cuda.out << cuda.err;
  }

  std::vector<std::uint32_t> program_ids(const Pod& p) {
    const int cg = ::open(p.dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    auto ids = bench::attached_device_program_ids(cg);
    ::close(cg);
    return ids;
  }

  const std::string python_ = env_or("GDW_GPU_PYTHON", "python3");
  RealGpu gpu_;
  TempDir files_{"gdw-gpu"};
  std::unique_ptr<CgroupSandbox> cgroups_;
  Pod with_gpu_, without_gpu_;
  int port_ = 0;
  std::unique_ptr<BackgroundProcess> daemon_;
};

TEST_F(RealGpuIncident, DaemonReloadOnV2IsRepairedWithoutRestartingAnything) {
  expect_gpu_works(with_gpu_, "as the runtime created it");
  EXPECT_EQ(open_errno(without_gpu_, gpu_.gpu), EPERM) << "a pod without a GPU";

  // systemd's daemon-reload: its new program allows the spec only, ANDed with the runtime's.
  ForeignProgram reload("sd_devices", SandboxNode::spec_rules());
  ASSERT_EQ(reload.attach(with_gpu_.dir), 0);
  expect_incident(with_gpu_);

  const auto started = std::chrono::steady_clock::now();
  ASSERT_TRUE(start_daemon()) << daemon_log();
  ASSERT_TRUE(eventually([&] { return all_nodes_allowed(with_gpu_); }, 30s)) << daemon_log();
  std::printf("GPU granted back %.3f s after the daemon's start\n",
              std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count());
  expect_gpu_works(with_gpu_, "after the daemon's repair");
  EXPECT_EQ(open_errno(without_gpu_, gpu_.gpu), EPERM) << "a pod without a GPU, after the repair\n" << daemon_log();

  // A runc-style re-apply while a CUDA process keeps computing inside the pod.
  const std::string stop = files_.path() + "/stop-computing";
  BackgroundProcess computing(in_pod(with_gpu_, {python_, "-c", kKeepComputing, stop}));
  ASSERT_TRUE(computing.wait_for_output("computing", 180s)) << computing.output();
  const int cg = ::open(with_gpu_.dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  const bench::Reapply reapply = bench::reapply_runc_style(cg, SandboxNode::spec_rules());
  ::close(cg);
  ASSERT_EQ(reapply.error, 0) << reapply.step << ": " << std::strerror(reapply.error);
  ASSERT_TRUE(eventually([&] { return all_nodes_allowed(with_gpu_); }, 30s)) << daemon_log();
  std::printf("GPU granted back %.1f ms after the runc-style attach\n",
              std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - reapply.applied).count());
  // The spec-only program alone denies the GPU: it is no longer all there is.
  EXPECT_NE(program_ids(with_gpu_), std::vector<std::uint32_t>{reapply.program_id});
  expect_gpu_works(with_gpu_, "after the runc-style re-apply");
  files_.write("stop-computing", "");
  EXPECT_EQ(computing.wait(60s), 0) << computing.output();
  EXPECT_NE(computing.output().find("still computing"), std::string::npos) << computing.output();

  EXPECT_EQ(open_errno(without_gpu_, gpu_.gpu), EPERM) << "a pod without a GPU, at the end\n" << daemon_log();
  EXPECT_GE(metric_value(http_get(port_), "gpu_devwatch_regrants_total", {{"method", "bpf"}, {"result", "success"}})
                .value_or(0),
            2)
      << http_get(port_);
}

}  // namespace
}  // namespace gdw::test
