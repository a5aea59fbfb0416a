// Never fight the NVIDIA hook either. nvidia-container-runtime-hook and nvidia-container-cli
// change a container's device rules as runc's hooks (v2: libnvidia-container copies each
// attached program and replaces it; v1: devices.allow) and, like runc, may fail when the
// rules change under them. The kernel cuts both names to the comm "nvidia-containe", and a
// wait names its writer from the probe record's comms alone: a writer of that comm must be
// waited for as runc is. Here a process calling itself nvidia-container-cli re-applies the
// container's rules (its GPU taken) and lives on: nothing is granted while it runs, and the
// GPU is back once it exits.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <thread>

#include "support/daemon_harness.h"
#include "support/sandbox_node.h"

namespace gdw::test {
namespace {

class HookApply : public ::testing::TestWithParam<bool> {};

TEST_P(HookApply, AWriterCallingItselfNvidiaContainerCliIsWaitedForUntilItExits) {
  const bool v2 = GetParam();
  if (::geteuid() != 0 || !SandboxNode::available(v2) || (v2 && !SandboxNode::v2_unavailable_reason().empty()))
    GTEST_SKIP() << "needs root and the cgroup " << (v2 ? "v2 hierarchy with device programs" : "v1 devices hierarchy");
  SandboxNode::Options options;
  options.v2 = v2;
  options.tag = "hook-apply";
  SandboxNode node(options);
  SandboxContainerSpec spec;
  spec.device_ids = {node.gpu_uuid(0)};
  const SandboxContainer& c = node.add_container(spec);
  node.write_checkpoint();
  DaemonHarness daemon(node);
  ASSERT_TRUE(daemon.start_with_defaults()) << daemon.output();
  ASSERT_TRUE(daemon.eventually_errno(c, "nvidia0", ENXIO)) << "the first grant\n" << daemon.output();

  // prctl(PR_SET_NAME) keeps 15 bytes, as exec does: the comm is "nvidia-containe".
  const pid_t hook = node.start_lingering_reapply(c, "nvidia-container-cli");
  const auto until = std::chrono::steady_clock::now() + std::chrono::milliseconds(400);
  for (int looks = 0; std::chrono::steady_clock::now() < until; ++looks) {
    ASSERT_EQ(node.open_errno(c, "nvidia0"), EPERM)
        << "granted inside the hook's apply (look " << looks << ")\n" << daemon.output();
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  node.finish_lingering(hook);
  EXPECT_TRUE(daemon.eventually_errno(c, "nvidia0", ENXIO)) << "not granted once the hook exited\n"
                                                            << daemon.output();
  EXPECT_EQ(node.open_errno(c, "nvidia1"), EPERM) << "not allocated: never granted";
  // Counted once the grant is made and the CPU handed over: a look right after may come first.
  EXPECT_TRUE(eventually([&] { return daemon.metric("gpu_devwatch_apply_waits_total", {{"until", "writer_exit"}}) >= 1; }))
      << daemon.metrics();
  EXPECT_EQ(daemon.metric("gpu_devwatch_apply_waits_total", {{"until", "limit"}}), 0) << daemon.output();
}

INSTANTIATE_TEST_SUITE_P(CgroupVersions, HookApply, ::testing::Values(true, false),
                         [](const ::testing::TestParamInfo<bool>& info) { return info.param ? "V2" : "V1"; });

}  // namespace
}  // namespace gdw::test
