// With a real crun (Debian 1.8.1) and the cgroupfs driver, on cgroup v1 and on cgroup v2 (a
// private mount namespace with the cgroup2 mount at /sys/fs/cgroup, as the runc v2 tests
// do): a busybox container whose spec lacks the GPU (the NVIDIA hook never ran), in the
// test tree under kubepods/burstable/pod<uid>/<id>. The daemon and `check --repair` each
// grant the allocated GPU, proven with open() through `crun exec` (EPERM before, ENXIO
// after); every other device is decided as crun decided it before.
#include <gtest/gtest.h>

#include <cerrno>
#include <memory>

#include "backend/device_programs_v2.h"
#include "support/cgroup_sandbox.h"
#include "support/daemon_harness.h"
#include "support/runc_container.h"
#include "support/sandbox_node.h"

namespace gdw::test {
namespace {

enum class Repairer { kDaemon, kCheck };
struct Case {
  bool v2;
  Repairer repairer;
};
std::string name_of(const ::testing::TestParamInfo<Case>& info) {
  return std::string(info.param.v2 ? "V2" : "V1") + (info.param.repairer == Repairer::kDaemon ? "Daemon" : "CheckRepair");
}

// Nodes made in the container outside /dev. None has a driver behind it except urandom.
const std::vector<OciDeviceNode> kNodes{{"/gpu/nvidia0", 195, 0},  {"/gpu/nvidiactl", 195, 255},
                                        {"/gpu/nvidia1", 195, 1},  {"/gpu/nvidia-uvm", kUvmMajor, 0},
                                        {"/gpu/tun", 10, 200},      {"/gpu/pts9", 136, 9},
                                        {"/gpu/console", 5, 1},     {"/gpu/urandom", 1, 9}};

class CrunCgroupfs : public ::testing::TestWithParam<Case> {
 protected:
  void SetUp() override {
    const bool v2 = GetParam().v2;
    if (!SandboxNode::available(v2) || !OciContainer::available(OciRuntime::kCrun))
      GTEST_SKIP() << "needs root, the cgroup " << (v2 ? "v2" : "v1 devices") << " hierarchy, crun and busybox-static";
    SandboxNode::Options options;
    options.v2 = v2;
    options.tag = "crun";
    node_ = std::make_unique<SandboxNode>(options);
    cleanup_.name = node_->cgroups().name();
    pod_uid_ = random_uuid();
    const std::string id = random_hex(64);
    container_ = std::make_unique<OciContainer>(OciContainer::Options{
        .id = id,
        .bundle_dir = node_->state_dir() + "/" + id,  // where containerd keeps it: identity from its annotations
        .cgroups_path = "/" + node_->kubepods_rel() + "/burstable/pod" + pod_uid_ + "/" + id,
        .annotations = {{"io.kubernetes.cri.container-type", "container"},
                        {"io.kubernetes.cri.container-name", "cuda"},
                        {"io.kubernetes.cri.sandbox-name", "cuda-0"},
                        {"io.kubernetes.cri.sandbox-namespace", "ml"},
                        {"io.kubernetes.cri.sandbox-uid", pod_uid_}},
        // nvidiactl only: the GPU was never granted.
        .allow = {{"c", 195, 255, "rw"}},
        .nodes = kNodes,
        .wrapper = v2 ? cgroup_v2_wrapper() : cgroup_v1_only_wrapper(),
        .runtime = OciRuntime::kCrun,
    });
    ASSERT_TRUE(container_->running()) << container_->start_error();
    node_->allocate(pod_uid_, "cuda", {node_->gpu_uuid(0)});
    node_->write_checkpoint();
    for (const auto& n : kNodes) before_[n.path] = container_->open_errno(n.path);
  }

  int open_errno(const std::string& path) { return container_->open_errno(path); }

  // crun creates the container's cgroup in every v1 controller (v1) or only in cgroup2 (v2).
  // Destroyed last: after the container and the sandbox node.
  EveryHierarchyCleanup cleanup_;
  std::unique_ptr<SandboxNode> node_;
  std::unique_ptr<OciContainer> container_;
  std::string pod_uid_;
  std::map<std::string, int> before_;
};

TEST_P(CrunCgroupfs, TheAllocatedGpuIsGrantedAndNothingElseChanges) {
  // The revocation is real: crun's own rules deny the GPU inside the container.
  ASSERT_EQ(before_["/gpu/nvidia0"], EPERM) << "crun applied a spec without the GPU";
  ASSERT_EQ(before_["/gpu/nvidiactl"], ENXIO) << "the spec's nvidiactl";
  ASSERT_EQ(before_["/gpu/nvidia1"], EPERM);
  ASSERT_EQ(before_["/gpu/tun"], EPERM) << "crun's defaults have no tun (runc's do)";
  ASSERT_NE(before_["/gpu/pts9"], EPERM) << "crun's defaults allow c 136:*";
  ASSERT_NE(before_["/gpu/console"], EPERM) << "crun's defaults allow /dev/console";

  const std::string config = node_->write_config();
  std::unique_ptr<DaemonHarness> daemon;
  if (GetParam().repairer == Repairer::kCheck) {
    auto before = run_command({GDW_BINARY, "check", "--config", config});
    EXPECT_EQ(before.exit_code, 1) << before.out << before.err;
    EXPECT_NE(before.out.find("ml/cuda-0/cuda"), std::string::npos) << before.out;
    auto repair = run_command({GDW_BINARY, "check", "--repair", "--config", config});
    EXPECT_EQ(repair.exit_code, 0) << repair.out << repair.err;
    EXPECT_EQ(open_errno("/gpu/nvidia0"), ENXIO) << repair.out << repair.err;
  } else {
    daemon = std::make_unique<DaemonHarness>(*node_);
    ASSERT_TRUE(daemon->start()) << daemon->output();
    EXPECT_TRUE(eventually([&] { return open_errno("/gpu/nvidia0") == ENXIO; }, std::chrono::seconds(10)))
        << daemon->output();
  }
  EXPECT_EQ(open_errno("/gpu/nvidia-uvm"), ENXIO) << "a control node of a GPU holder";
  EXPECT_EQ(open_errno("/gpu/nvidia1"), EPERM) << "another GPU: not allocated, still denied";
  for (const char* path : {"/gpu/nvidiactl", "/gpu/tun", "/gpu/pts9", "/gpu/console", "/gpu/urandom"})
    EXPECT_EQ(open_errno(path), before_[path]) << path << " decided as crun decided it";
  if (daemon) {
    EXPECT_EQ(daemon->metric("gpu_devwatch_containers_missing_devices"), 0) << daemon->output();
  }
}

INSTANTIATE_TEST_SUITE_P(Crun, CrunCgroupfs,
                         ::testing::Values(Case{false, Repairer::kDaemon}, Case{false, Repairer::kCheck},
                                           Case{true, Repairer::kDaemon}, Case{true, Repairer::kCheck}),
                         name_of);

// crun's eBPF device program (its own generator) as the interpreter reads it back, and the
// wrapper around it: its code is reloadable, and wrapping keeps every other verdict.
TEST(CrunV2Program, TheInterpreterFollowsCrunsCodeAndTheWrapperKeepsItsVerdicts) {
  if (!SandboxNode::available(true) || !OciContainer::available(OciRuntime::kCrun))
    GTEST_SKIP() << "needs root, cgroup2, crun and busybox-static";
  CgroupSandbox sandbox("unified", "crunprog");
  const std::string id = random_hex(64);
  TempDir bundles("gdw-crun-prog");
  const std::string rel = sandbox.name() + "/kubepods/burstable/pod" + random_uuid() + "/" + id;
  std::string cleanup_name = sandbox.name();
  {
    OciContainer container({.id = id,
                            .bundle_dir = bundles.path() + "/" + id,
                            .cgroups_path = "/" + rel,
                            .annotations = {},
                            .allow = {{"c", 195, 255, "rw"}},
                            .nodes = kNodes,
                            .wrapper = cgroup_v2_wrapper(),
                            .runtime = OciRuntime::kCrun});
    ASSERT_TRUE(container.running()) << container.start_error();
    const std::string dir = "/sys/fs/cgroup/unified/" + rel;
    auto programs = query_device_programs(dir);
    ASSERT_TRUE(programs.ok()) << programs.error().message;
    ASSERT_EQ(programs->size(), 1u) << "crun's program on the container's own cgroup (cgroupfs: no sub-cgroup)";
    const AttachedDeviceProgram& crun = (*programs)[0];
    EXPECT_EQ(crun.owner, ProgramOwner::kRuntime) << crun.name;
    EXPECT_TRUE(crun.subgroup.empty());
    ASSERT_FALSE(crun.code.empty());
    EXPECT_TRUE(crun.unwrappable.empty()) << crun.unwrappable;
    for (const auto& n : kNodes) {
      const int kernel = container.open_errno(n.path);
      for (std::uint8_t access : {kAccessRead, kAccessWrite, kAccessReadWrite}) {
        const Verdict v = run_device_program(crun.code, {DeviceType::kChar, n.major, n.minor}, access);
        if (access == kAccessRead) {
          EXPECT_EQ(v == Verdict::kDeny, kernel == EPERM) << n.path;
        }
        EXPECT_NE(v, Verdict::kUnknown) << n.path << ": an instruction the interpreter does not run";
      }
    }
    const WantedDevice gpu{{DeviceType::kChar, 195, 0}, kAccessReadWrite, "nvidia0", "test"};
    auto repair = repair_device_programs(dir, {gpu});
    ASSERT_TRUE(repair.ok()) << repair.error().message;
    ASSERT_EQ(repair->replaced.size(), 1u) << "crun's code reloads inside our wrapper";
    EXPECT_TRUE(repair->left_attached.empty());
    EXPECT_TRUE(repair->still_denied.empty());
    ASSERT_EQ(repair->now.size(), 1u);
    EXPECT_EQ(repair->now[0].inner.size(), crun.code.size()) << "crun's instructions, unchanged";
    EXPECT_EQ(container.open_errno("/gpu/nvidia0"), ENXIO);
    for (const char* path : {"/gpu/nvidia1", "/gpu/tun"}) EXPECT_EQ(container.open_errno(path), EPERM) << path;
  }
  remove_cgroup_tree("/sys/fs/cgroup/unified/" + cleanup_name);
}

}  // namespace
}  // namespace gdw::test
