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
#include <string>
#include <thread>

#include "support/apply_wait_checks.h"
#include "support/daemon_harness.h"
#include "support/sandbox_node.h"

namespace gdw::test {
namespace {

class HookApply : public ::testing::TestWithParam<bool> {};

TEST_P(HookApply, AWriterCallingItselfNvidiaContainerCliIsWaitedForUntilItExits) {
  const bool v2 = GetParam();
  if (const std::string why = apply_wait_unavailable(v2); !why.empty()) GTEST_SKIP() << why;
  SandboxNode node(apply_wait_node(v2, false, "hook-apply"));
  const SandboxContainer& c = add_gpu_container(node);
  DaemonHarness daemon(node);
  ASSERT_TRUE(daemon.start_with_defaults()) << daemon.output();
  ASSERT_TRUE(daemon.eventually_errno(c, "nvidia0", ENXIO)) << "the first grant\n" << daemon.output();

  // prctl(PR_SET_NAME) keeps 15 bytes, as exec does: the comm is "nvidia-containe".
  const pid_t hook = node.start_lingering_reapply(c, "nvidia-container-cli");
  ASSERT_TRUE(stays_denied(node, c, daemon, std::chrono::milliseconds(400), "the hook"));
  node.finish_lingering(hook);
  expect_granted_after_writer_exit(node, c, daemon, "the hook");
}

INSTANTIATE_TEST_SUITE_P(CgroupVersions, HookApply, ::testing::Values(true, false),
                         [](const ::testing::TestParamInfo<bool>& info) { return info.param ? "V2" : "V1"; });

}  // namespace
}  // namespace gdw::test
