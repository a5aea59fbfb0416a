// The sandbox demo: a GPU node without a GPU or a kubelet, on the real kernel.
// Creates real test cgroups (under a unique parent), GPU device nodes with mknod, a fixture
// /proc/driver/nvidia tree, OCI bundles and a valid kubelet checkpoint; runs the real
// `gpu-devwatch run` against it; replays the incident (a runtime re-applying the
// container's device rules: deny `a`, then allows without the GPU and nvidia-uvm); shows
// from inside the container that the GPU was lost and came back, and what /metrics says;
// then removes everything.
#include <signal.h>

#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <sstream>
#include <thread>

#include "support/daemon_harness.h"

using namespace gdw::test;

namespace {

const char* verdict(int err) {
  if (err == ENXIO) return "ALLOWED (ENXIO: the cgroup lets it through; no driver behind this demo node)";
  if (err == EPERM) return "DENIED  (EPERM: this is the \"unknown error\" CUDA/NVML report)";
  return std::strerror(err);
}

void show_open(SandboxNode& node, const SandboxContainer& c, const char* dev) {
  std::printf("    open(/dev/%s) inside %s/%s -> %s\n", dev, c.spec.pod_name.c_str(), c.spec.container_name.c_str(),
              verdict(node.open_errno(c, dev)));
}

void show_metrics(const std::string& text) {
  std::istringstream in(text);
  std::string line;
  while (std::getline(in, line)) {
    if (line.empty() || line[0] == '#') continue;
    for (const char* name : {"gpu_devwatch_drift_total", "gpu_devwatch_regrants_total",
                             "gpu_devwatch_repair_duration_seconds_sum", "gpu_devwatch_repair_duration_seconds_count",
                             "gpu_devwatch_containers_watched", "gpu_devwatch_containers_missing_devices",
                             "gpu_devwatch_checkpoint_checksum_valid"}) {
      if (line.rfind(name, 0) == 0) std::printf("    %s\n", line.c_str());
    }
  }
}

}  // namespace

int main() {
  if (!SandboxNode::available()) {
    std::fprintf(stderr, "gdw-demo: needs root and the cgroup v1 devices hierarchy at /sys/fs/cgroup/devices\n");
    return 2;
  }
  std::printf("== gpu-devwatch demo: a sandbox GPU node on the real kernel ==\n\n");
  SandboxNode node;
  const auto& trainer = node.add_container({.pod_namespace = "ml", .pod_name = "trainer-0", .container_name = "trainer",
                                            .device_ids = {node.gpu_uuid(0)}});
  const auto& web = node.add_container({.pod_namespace = "web", .pod_name = "nginx-0", .container_name = "nginx"});
  node.write_checkpoint();
  std::printf("1. Node: 2 GPUs (mknod'ed nodes in %s), kubelet checkpoint %s\n", node.dev_root().c_str(),
              node.checkpoint_path().c_str());
  std::printf("   Pod ml/trainer-0 holds %s (nvidia0); pod web/nginx-0 holds no GPU.\n", node.gpu_uuid(0).c_str());
  std::printf("   Container cgroup: %s\n\n", trainer.cgroup_dir.c_str());

  DaemonHarness daemon(node);
  if (!daemon.start()) {
    std::fprintf(stderr, "the daemon did not start:\n%s\n", daemon.output().c_str());
    return 1;
  }
  std::printf("2. gpu-devwatch run (pid %d) is watching; the GPU works:\n", daemon.process().pid());
  show_open(node, trainer, "nvidia0");
  show_open(node, trainer, "nvidia-uvm");

  std::printf("\n3. The incident: the runtime re-applies the container's spec (deny 'a', then the spec's\n"
              "   allows, which never listed the GPU: it was injected out of band by the NVIDIA hook).\n");
  std::printf("   First with the daemon paused, to see what the container would live with:\n");
  daemon.process().signal(SIGSTOP);
  node.reapply_spec(trainer);
  node.reapply_spec(web);
  show_open(node, trainer, "nvidia0");
  show_open(node, trainer, "nvidia-uvm");

  std::printf("\n4. The daemon resumes (it reads the queued events and repairs):\n");
  daemon.process().signal(SIGCONT);
  daemon.eventually_errno(trainer, "nvidia0", ENXIO);
  show_open(node, trainer, "nvidia0");
  show_open(node, trainer, "nvidia-uvm");
  show_open(node, trainer, "nvidia1");
  std::printf("    (nvidia1 is not allocated to this pod: it stays denied)\n");
  show_open(node, web, "nvidia0");
  std::printf("    (web/nginx-0 has no GPU: never touched)\n");

  std::printf("\n5. Again, live: the runtime re-applies while the daemon runs.\n");
  auto t0 = std::chrono::steady_clock::now();
  node.reapply_spec(trainer);
  daemon.eventually_errno(trainer, "nvidia0", ENXIO);
  auto us = std::chrono::duration_cast<std::chrono::microseconds>(std::chrono::steady_clock::now() - t0).count();
  show_open(node, trainer, "nvidia0");
  std::printf("    back within %lld µs of the revoking writes (as observed from outside, open() probe included)\n\n",
              static_cast<long long>(us));

  std::this_thread::sleep_for(std::chrono::milliseconds(100));
  std::printf("6. What /metrics says (http://127.0.0.1:%d/metrics):\n", daemon.port());
  show_metrics(daemon.metrics());

  std::printf("\n7. What the daemon logged:\n");
  std::istringstream log(daemon.output());
  std::string line;
  while (std::getline(log, line))
    if (line.find("granted back") != std::string::npos || line.find("watching GPU") != std::string::npos)
      std::printf("    %s\n", line.c_str());

  int code = daemon.stop();
  std::printf("\n8. Stopped the daemon (exit %d); removing the sandbox cgroups, processes and files.\n", code);
  return code == 0 ? 0 : 1;
}
