// `check --repair` never grants inside a runtime's update, nor inside a create it finds by
// the runtime's command line. It has no probe: it looks for runc or crun processes outside
// the pods whose command line creates or updates a GPU container
// (runtime/runtime_applies.h), after the look that found devices missing, and waits for
// their exit, at most repair.apply_wait_limit. Here the runtime is a process called runc or
// crun (a script, as containerd's shim would run runc) that re-applied the container's spec
// (the GPU not in it) and lives on, its apply not ended. A process dressed the same inside
// another container is a tenant's: not waited for.
#include <gtest/gtest.h>

#include <cerrno>
#include <chrono>
#include <string>

#include "support/apply_wait_checks.h"
#include "support/process.h"
#include "support/sandbox_node.h"

namespace gdw::test {
namespace {

using std::chrono::milliseconds;

class CheckApply : public ::testing::TestWithParam<bool> {
 protected:
  void SetUp() override {
    if (const std::string why = apply_wait_unavailable(GetParam()); !why.empty()) GTEST_SKIP() << why;
  }
};

TEST_P(CheckApply, RepairWaitsForTheUpdatesEnd) {
  SandboxNode node(apply_wait_node(GetParam(), false, "check-apply"));
  const SandboxContainer& c = add_gpu_container(node);
  const pid_t update = node.start_lingering_runtime(c, "runc", "update");
  expect_check_waits_for_apply(node, c, "the runtime's update", [&] { node.finish_lingering(update); });
}

TEST_P(CheckApply, AnUpdateOutlastingTheLimitIsRepairedAndSaidSo) {
  SandboxNode node(apply_wait_node(GetParam(), false, "check-apply-limit"));
  const SandboxContainer& c = add_gpu_container(node);
  const pid_t update = node.start_lingering_runtime(c, "crun", "update");
  const auto started = std::chrono::steady_clock::now();
  auto r = run_command({GDW_BINARY, "check", "--repair", "--config",
                        node.write_config("repair:\n  apply_wait_limit: 200ms\n")});
  const auto took = std::chrono::steady_clock::now() - started;
  const int open_after = node.open_errno(c, "nvidia0");
  node.finish_lingering(update);
  EXPECT_EQ(r.exit_code, 0) << r.out << r.err;
  EXPECT_GE(took, milliseconds(200)) << r.out;
  EXPECT_NE(r.out.find("repaired though its runtime (crun, pid " + std::to_string(update) + ") is updating it"),
            std::string::npos)
      << r.out;
  EXPECT_EQ(open_after, ENXIO) << r.out;
}

// A tenant's process can call itself runc and name any container in its arguments; it
// cannot leave its own container's cgroup. One in another container, "updating" this one,
// does not hold this one's repair.
TEST_P(CheckApply, ARuntimeLookalikeInsideAContainerIsNotWaitedFor) {
  SandboxNode node(apply_wait_node(GetParam(), false, "check-apply-tenant"));
  const SandboxContainer& c = add_gpu_container(node);
  SandboxContainerSpec other;
  other.container_name = "tenant";
  const SandboxContainer& tenant = node.add_container(other);
  const pid_t lookalike = node.start_lingering_runtime(c, "runc", "update", &tenant);
  const auto started = std::chrono::steady_clock::now();
  auto r = run_command({GDW_BINARY, "check", "--repair", "--config",
                        node.write_config("repair:\n  apply_wait_limit: 3s\n")});
  const auto took = std::chrono::steady_clock::now() - started;
  const int open_after = node.open_errno(c, "nvidia0");
  node.finish_lingering(lookalike);
  EXPECT_EQ(r.exit_code, 0) << r.out << r.err;
  EXPECT_LT(took, milliseconds(2500)) << "waited for a tenant's process\n" << r.out;
  EXPECT_EQ(r.out.find("repaired though"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("granted nvidia0"), std::string::npos) << r.out;
  EXPECT_EQ(open_after, ENXIO) << r.out;
}

// A create whose pid file names no process of this pid namespace's runtime (containerd in
// another pid namespace: the runtime writes its own namespace's pid) is found by the
// runtime's command line.
TEST_P(CheckApply, ACreateSeenOnlyByItsCommandLineIsWaitedFor) {
  SandboxNode node(apply_wait_node(GetParam(), false, "check-create-cmdline"));
  const SandboxContainer& c = add_gpu_container(node);
  const pid_t create = node.start_lingering_runtime(c, "runc", "create");
  expect_check_waits_for_apply(node, c, "the runtime's create", [&] { node.finish_lingering(create); });
}

INSTANTIATE_TEST_SUITE_P(CgroupVersions, CheckApply, ::testing::Values(true, false),
                         [](const ::testing::TestParamInfo<bool>& info) { return info.param ? "V2" : "V1"; });

}  // namespace
}  // namespace gdw::test
