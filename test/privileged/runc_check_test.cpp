// With a real runtime: Debian's runc starts a busybox container in the test tree whose spec
// allows the GPU but not nvidia-uvm (seed 001: the plugin started before the node existed).
// `check --repair` makes nvidia-uvm openable inside it, proven with `runc exec`.
#include <gtest/gtest.h>

#include <cerrno>

#include "support/cgroup_sandbox.h"
#include "support/runc_container.h"
#include "support/sandbox_node.h"

namespace gdw::test {
namespace {

TEST(RuncCheck, RepairGrantsNvidiaUvmInsideARealRuncContainer) {
  if (!SandboxNode::available() || !RuncContainer::available())
    GTEST_SKIP() << "needs root, the cgroup v1 devices hierarchy, runc and busybox-static";
  SandboxNode node;
  const std::string pod_uid = random_uuid();
  const std::string id = random_hex(64);
  // runc creates the container's cgroup in every v1 controller: clean them all up.
  struct ControllerCleanup {
    std::string name;
    ~ControllerCleanup() {
      for (const char* ctrl : {"cpu", "cpuacct", "cpuset", "memory", "freezer", "blkio", "pids", "systemd", "unified"})
        remove_cgroup_tree(std::string("/sys/fs/cgroup/") + ctrl + "/" + name);
    }
  } cleanup{node.cgroups().name()};
  const std::string cgroup_rel = node.kubepods_rel() + "/burstable/pod" + pod_uid + "/" + id;
  RuncContainer container({
      .id = id,
      .bundle_dir = node.state_dir() + "/" + id,
      .cgroups_path = "/" + cgroup_rel,
      .annotations = {{"io.kubernetes.cri.container-type", "container"},
                      {"io.kubernetes.cri.container-name", "cuda"},
                      {"io.kubernetes.cri.sandbox-name", "cuda-0"},
                      {"io.kubernetes.cri.sandbox-namespace", "ml"},
                      {"io.kubernetes.cri.sandbox-uid", pod_uid}},
      .allow = {{"c", 195, 0, "rw"}, {"c", 195, 255, "rw"}},  // the GPU, as passDeviceSpecs would
      .nodes = {{"/gpu/nvidia0", 195, 0}, {"/gpu/nvidiactl", 195, 255}, {"/gpu/nvidia-uvm", kUvmMajor, 0}},
  });
  ASSERT_TRUE(container.running()) << container.start_error();
  node.allocate(pod_uid, "cuda", {node.gpu_uuid(0)});
  node.write_checkpoint();

  EXPECT_EQ(container.open_errno("/gpu/nvidia0"), ENXIO);
  EXPECT_EQ(container.open_errno("/gpu/nvidia-uvm"), EPERM) << "runc applied a spec without nvidia-uvm";

  const std::string config = node.write_config();
  auto before = run_command({GDW_BINARY, "check", "--config", config});
  EXPECT_EQ(before.exit_code, 1) << before.out << before.err;
  EXPECT_NE(before.out.find("ml/cuda-0/cuda"), std::string::npos) << before.out;

  auto repair = run_command({GDW_BINARY, "check", "--repair", "--config", config});
  EXPECT_EQ(repair.exit_code, 0) << repair.out << repair.err;
  EXPECT_EQ(container.open_errno("/gpu/nvidia-uvm"), ENXIO) << repair.out;
  EXPECT_EQ(container.open_errno("/gpu/nvidia0"), ENXIO);
}

}  // namespace
}  // namespace gdw::test
