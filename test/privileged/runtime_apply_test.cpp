// Never fight the runtime: real runc and crun create GPU containers, one after another, in a
// pod whose GPU the daemon (enforce mode, defaults) must grant, on cgroup v1 and v2. The
// runtimes check their own device apply (v1: runc reads devices.list back and fails with
// "resulting devices cgroup doesn't precisely match target"; v2: the program runc saw must
// still be there to replace), so a grant inside their apply fails the create. Each create
// must succeed, and the GPU must then open (ENXIO, no driver) inside, through the runtime's
// exec: the grant came after the create ended (gpu_devwatch_apply_waits_total says how).
#include <gtest/gtest.h>

#include <cerrno>
#include <memory>

#include "support/cgroup_sandbox.h"
#include "support/daemon_harness.h"
#include "support/runc_container.h"
#include "support/sandbox_node.h"

namespace gdw::test {
namespace {

struct Case {
  bool v2;
  OciRuntime runtime;
};
std::string name_of(const ::testing::TestParamInfo<Case>& info) {
  return std::string(info.param.v2 ? "V2" : "V1") + (info.param.runtime == OciRuntime::kRunc ? "Runc" : "Crun");
}

constexpr int kCreates = 12;
const std::vector<OciDeviceNode> kNodes{{"/gpu/nvidia0", 195, 0}, {"/gpu/nvidiactl", 195, 255},
                                        {"/gpu/nvidia1", 195, 1}, {"/gpu/nvidia-uvm", kUvmMajor, 0}};

class RuntimeApply : public ::testing::TestWithParam<Case> {};

TEST_P(RuntimeApply, CreatesBesideTheDaemonNeverFailAndTheGpuIsGrantedAfterEach) {
  const auto [v2, runtime] = GetParam();
  if (!SandboxNode::available(v2) || !OciContainer::available(runtime))
    GTEST_SKIP() << "needs root, the cgroup " << (v2 ? "v2" : "v1 devices") << " hierarchy, " << to_string(runtime)
                 << " and busybox-static";
  EveryHierarchyCleanup cleanup;  // destroyed last: the runtimes make cgroups in every hierarchy
  SandboxNode::Options options;
  options.v2 = v2;
  options.tag = "apply";
  auto node = std::make_unique<SandboxNode>(options);
  cleanup.name = node->cgroups().name();
  const std::string pod_uid = random_uuid();
  node->allocate(pod_uid, "cuda", {node->gpu_uuid(0)});
  node->write_checkpoint();
  DaemonHarness daemon(*node);
  ASSERT_TRUE(daemon.start_with_defaults()) << daemon.output();

  int failed = 0;
  for (int attempt = 0; attempt < kCreates; ++attempt) {
    const std::string id = random_hex(64);
    OciContainer container({
        .id = id,
        .bundle_dir = node->state_dir() + "/" + id,
        .cgroups_path = "/" + node->kubepods_rel() + "/burstable/pod" + pod_uid + "/" + id,
        .annotations = {{"io.kubernetes.cri.container-type", "container"},
                        {"io.kubernetes.cri.container-name", "cuda"},
                        {"io.kubernetes.cri.sandbox-name", "cuda-0"},
                        {"io.kubernetes.cri.sandbox-namespace", "ml"},
                        {"io.kubernetes.cri.sandbox-uid", pod_uid}},
        .allow = {{"c", 195, 255, "rw"}},  // nvidiactl: the GPU itself comes out of band
        .nodes = kNodes,
        .wrapper = v2 ? cgroup_v2_wrapper() : (runtime == OciRuntime::kCrun ? cgroup_v1_only_wrapper()
                                                                             : std::vector<std::string>{}),
        .runtime = runtime,
    });
    if (!container.running()) {
      ++failed;
      ADD_FAILURE() << "create " << attempt << " failed: " << container.start_error();
      continue;
    }
    EXPECT_TRUE(eventually([&] { return container.open_errno("/gpu/nvidia0") == ENXIO; }, std::chrono::seconds(5)))
        << "create " << attempt << ": the allocated GPU was not granted\n" << daemon.output();
    EXPECT_EQ(container.open_errno("/gpu/nvidia1"), EPERM) << "not allocated: never granted";
  }
  EXPECT_EQ(failed, 0) << daemon.output();
  // The grants waited for the runtime: its exit, or its pid file.
  // (Counted once each grant is made and the CPU handed over: a look right after may come first.)
  EXPECT_TRUE(eventually([&] {
    return daemon.metric("gpu_devwatch_apply_waits_total", {{"until", "writer_exit"}}) +
               daemon.metric("gpu_devwatch_apply_waits_total", {{"until", "create"}}) > 0;
  })) << daemon.metrics();
  EXPECT_EQ(daemon.metric("gpu_devwatch_apply_waits_total", {{"until", "limit"}}), 0) << daemon.output();
}

INSTANTIATE_TEST_SUITE_P(Runtimes, RuntimeApply,
                         ::testing::Values(Case{false, OciRuntime::kRunc}, Case{true, OciRuntime::kRunc},
                                           Case{false, OciRuntime::kCrun}, Case{true, OciRuntime::kCrun}),
                         name_of);

}  // namespace
}  // namespace gdw::test
