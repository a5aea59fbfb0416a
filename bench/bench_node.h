// What the node benchmarks share: the bench containers on a sandbox node, and a repairer
// process's CPU time and RSS as /proc reports them.
#pragma once

#include <sys/types.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <functional>
#include <iterator>
#include <sstream>
#include <string>
#include <vector>

#include "support/sandbox_node.h"

namespace gdw::bench {

// Adds `containers` pods bench/p<i> (one container "c" each) to `node`; the first
// `gpu_containers` hold one GPU each, round robin over the node's first `gpus`. Runs
// `before_each` before every container (creating hundreds takes a while: a chance to stop
// on a signal), writes the checkpoint, and returns the GPU containers in order.
inline std::vector<const test::SandboxContainer*> add_bench_containers(
    test::SandboxNode& node, int containers, int gpu_containers, int gpus,
    const std::function<void()>& before_each = [] {}) {
  std::vector<const test::SandboxContainer*> gpu_holders;
  for (int i = 0; i < containers; ++i) {
    before_each();
    const bool gpu = i < gpu_containers;
    const auto& c = node.add_container({.pod_namespace = "bench", .pod_name = "p" + std::to_string(i),
                                        .container_name = "c",
                                        .device_ids = gpu ? std::vector<std::string>{node.gpu_uuid(i % gpus)}
                                                          : std::vector<std::string>{}});
    if (gpu) gpu_holders.push_back(&c);
  }
  node.write_checkpoint();
  return gpu_holders;
}

// utime + stime of the whole process, in seconds (clock-tick resolution).
inline double cpu_seconds(pid_t pid) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/stat");
  std::string s((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  std::istringstream fields(s.substr(s.rfind(')') + 2));
  std::string f;
  unsigned long long utime = 0, stime = 0;
  for (int i = 3; i <= 15 && fields >> f; ++i) {
    if (i == 14) utime = std::stoull(f);
    if (i == 15) stime = std::stoull(f);
  }
  return static_cast<double>(utime + stime) / static_cast<double>(::sysconf(_SC_CLK_TCK));
}

// VmRSS from /proc/<pid>/status; -1 when the process is gone.
inline double rss_mib(pid_t pid) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/status");
  std::string line;
  while (std::getline(in, line))
    if (line.rfind("VmRSS:", 0) == 0) return std::stod(line.substr(6)) / 1024.0;
  return -1;
}

// What a repairer asked of the kernel: its wake-ups (context switches of all its threads)
// and its read and write system calls (/proc/<pid>/io). Per storm, they tell a repairer's
// own overhead (more wake-ups, more calls) from the work every fixer shares.
struct KernelCounts {
  double wakeups = 0, reads = 0, writes = 0;
};

inline double status_field(const std::string& path, const std::string& key) {
  std::ifstream in(path);
  std::string line;
  while (std::getline(in, line))
    if (line.rfind(key, 0) == 0) return std::stod(line.substr(key.size()));
  return 0;
}

inline KernelCounts kernel_counts(pid_t pid) {
  KernelCounts k;
  const std::string proc = "/proc/" + std::to_string(pid);
  std::error_code ec;
  for (const auto& task : std::filesystem::directory_iterator(proc + "/task", ec)) {
    const std::string status = task.path().string() + "/status";
    k.wakeups += status_field(status, "voluntary_ctxt_switches:") + status_field(status, "nonvoluntary_ctxt_switches:");
  }
  k.reads = status_field(proc + "/io", "syscr:");
  k.writes = status_field(proc + "/io", "syscw:");
  return k;
}

}  // namespace gdw::bench
