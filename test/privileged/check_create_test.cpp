// `check --repair` never grants inside a runtime's create either. A container's runtime (a
// process calling itself runc) has made its cgroup, applied the spec (the GPU not in it) and
// lives on, its pid file not yet written: `check --repair` waits for the create's end, as
// the daemon does, and grants after it; where the create outlasts repair.apply_wait_limit it
// grants then, and says what still went on.
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

// A GPU container `name` holding GPU `gpu`, its runtime (calling itself runc) still in its
// create: the pid file is written when the runtime is let go.
const SandboxContainer& create(SandboxNode& node, const std::string& name = "cuda", int gpu = 0) {
  SandboxContainerSpec spec;
  spec.container_name = name;
  spec.device_ids = {node.gpu_uuid(gpu)};
  const SandboxContainer& c = node.add_container_in_create(spec, "runc", SandboxNode::CreateShape::kRuntimeMakesCgroup,
                                                           {.pid_file_at_exit = true});
  node.write_checkpoint();
  return c;
}

class CheckCreate : public ::testing::TestWithParam<bool> {
 protected:
  void SetUp() override {
    if (const std::string why = apply_wait_unavailable(GetParam()); !why.empty()) GTEST_SKIP() << why;
  }
};

TEST_P(CheckCreate, RepairWaitsForTheCreatesEnd) {
  SandboxNode node(apply_wait_node(GetParam(), false, "check-create"));
  const SandboxContainer& c = create(node);
  expect_check_waits_for_apply(node, c, "the runtime's create", [&] { node.release_lingering(c.runtime); });
  node.finish_runtime(c);
}

TEST_P(CheckCreate, ACreateOutlastingTheLimitIsRepairedAndSaidSo) {
  SandboxNode node(apply_wait_node(GetParam(), false, "check-create-limit"));
  const SandboxContainer& c = create(node);
  const auto started = std::chrono::steady_clock::now();
  auto r = run_command({GDW_BINARY, "check", "--repair", "--config",
                        node.write_config("repair:\n  apply_wait_limit: 200ms\n")});
  const auto took = std::chrono::steady_clock::now() - started;
  const int open_after = node.open_errno(c, "nvidia0");
  node.finish_runtime(c);
  EXPECT_EQ(r.exit_code, 0) << r.out << r.err;
  EXPECT_GE(took, milliseconds(200)) << r.out;
  EXPECT_NE(r.out.find("repaired though its runtime's create has not written"), std::string::npos) << r.out;
  EXPECT_EQ(open_after, ENXIO) << r.out;
}

// The creates of a node are waited for together: two that both outlast the limit take one
// limit, not two. Waited for one after the other (before), the second create's bundle was
// older than the limit by its turn, so it was taken for no create at all and granted inside
// its runtime's create, with no wait.
TEST_P(CheckCreate, CreatesAreWaitedForTogether) {
  SandboxNode node(apply_wait_node(GetParam(), false, "check-create-two"));
  const SandboxContainer& a = create(node);
  const SandboxContainer& b = create(node, "cuda-b", 1);
  const auto started = std::chrono::steady_clock::now();
  auto r = run_command({GDW_BINARY, "check", "--repair", "--config",
                        node.write_config("repair:\n  apply_wait_limit: 600ms\n")});
  const auto took = std::chrono::steady_clock::now() - started;
  const int open_a = node.open_errno(a, "nvidia0"), open_b = node.open_errno(b, "nvidia1");
  node.finish_runtime(a);
  node.finish_runtime(b);
  EXPECT_EQ(r.exit_code, 0) << r.out << r.err;
  EXPECT_GE(took, milliseconds(600)) << r.out;
  EXPECT_LT(took, milliseconds(1200)) << "the two creates were waited for one after the other\n" << r.out;
  EXPECT_NE(r.out.find("cuda: repaired though"), std::string::npos) << "a create not waited for\n" << r.out;
  EXPECT_NE(r.out.find("cuda-b: repaired though"), std::string::npos) << "a create not waited for\n" << r.out;
  EXPECT_EQ(open_a, ENXIO) << r.out;
  EXPECT_EQ(open_b, ENXIO) << r.out;
}

INSTANTIATE_TEST_SUITE_P(CgroupVersions, CheckCreate, ::testing::Values(true, false),
                         [](const ::testing::TestParamInfo<bool>& info) { return info.param ? "V2" : "V1"; });

// A create that outlasts the limit while its container already has every device it wants
// (here granted by hand, on v1): nothing is granted, and check says so rather than "repaired".
TEST(CheckCreateV1, ACreateOutlastingTheLimitWithNothingMissingIsNotCalledRepaired) {
  if (const std::string why = apply_wait_unavailable(false); !why.empty()) GTEST_SKIP() << why;
  SandboxNode node(apply_wait_node(false, false, "check-create-whole"));
  const SandboxContainer& c = create(node);
  for (std::uint32_t major : {node.majors().nvidia, node.majors().uvm, node.majors().caps})
    ASSERT_EQ(node.cgroups().allow(c.cgroup_rel, "c " + std::to_string(major) + ":* rwm"), 0);
  ASSERT_EQ(node.open_errno(c, "nvidia0"), ENXIO);
  auto r = run_command({GDW_BINARY, "check", "--repair", "--config",
                        node.write_config("repair:\n  apply_wait_limit: 100ms\n")});
  node.finish_runtime(c);
  EXPECT_EQ(r.exit_code, 0) << r.out << r.err;
  EXPECT_EQ(r.out.find("repaired though"), std::string::npos) << r.out;
  EXPECT_EQ(r.out.find("granted nvidia"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("cuda: its runtime's create has not written"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("(nothing was granted)"), std::string::npos) << r.out;
}

}  // namespace
}  // namespace gdw::test
