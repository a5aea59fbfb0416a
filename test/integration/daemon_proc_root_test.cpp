// The daemon reads the v1 devices hierarchy id (for the probe's cgroup_mkdir events) from
// <devices.proc_root>/cgroups, not from its own /proc: a containerised daemon reads the
// host's through the mounted proc_root, and a test fixture's is its own.
#include <gtest/gtest.h>

#include "kubelet/checkpoint.h"
#include "support/process.h"
#include "support/temp_dir.h"

namespace gdw::test {
namespace {

// Starts the daemon on a fixture v1 tree whose proc_root holds `proc_cgroups` (none when
// empty) and returns its output up to "ready".
std::string output_until_ready(const std::string& proc_cgroups, std::string* proc_root) {
  TempDir dir("gdw-proc-root");
  dir.mkdirs("cgroup/devices/kubepods/burstable");
  dir.write("kubelet/kubelet_internal_checkpoint", write_checkpoint({}, {}));
  dir.mkdirs("proc");
  dir.mkdirs("dev");
  if (!proc_cgroups.empty()) dir.write("proc/cgroups", proc_cgroups);
  *proc_root = dir / "proc";
  const std::string config = dir.write(
      "config.yaml", "cgroup:\n  root: " + dir / "cgroup" + "\nkubelet:\n  checkpoint: " +
                         dir / "kubelet/kubelet_internal_checkpoint" + "\n  pod_resources_socket: " + dir / "none.sock" +
                         "\nruntime:\n  state_dirs: [" + dir / "run" + "]\ndevices:\n  dev_root: " + dir / "dev" +
                         "\n  proc_root: " + dir / "proc" + "\nmetrics:\n  listen: 127.0.0.1:" +
                         std::to_string(free_port()) + "\nprobe:\n  enabled: false\n");
  BackgroundProcess daemon({GDW_BINARY, "run", "--config", config});
  EXPECT_TRUE(daemon.wait_for_output("ready")) << daemon.output();
  return daemon.output();
}

const std::string kFallback = "; new containers are found by inotify alone";

TEST(DaemonProcRoot, TheHierarchyIdComesFromTheConfiguredProcRoot) {
  std::string proc;
  const auto missing = output_until_ready("", &proc);
  EXPECT_NE(missing.find(proc + "/cgroups: No such file or directory" + kFallback), std::string::npos) << missing;

  const auto v2_only = output_until_ready(read_file(std::string(GDW_TEST_FIXTURES) + "/proc-cgroups-v2/cgroups"), &proc);
  EXPECT_NE(v2_only.find(proc + "/cgroups: the devices controller is on no cgroup v1 hierarchy" + kFallback),
            std::string::npos)
      << v2_only;

  const auto hybrid = output_until_ready(read_file(std::string(GDW_TEST_FIXTURES) + "/proc-cgroups-hybrid/cgroups"), &proc);
  EXPECT_EQ(hybrid.find(kFallback), std::string::npos) << hybrid;
  EXPECT_NE(hybrid.find("ready"), std::string::npos) << hybrid;
}

}  // namespace
}  // namespace gdw::test
