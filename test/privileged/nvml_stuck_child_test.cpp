// An NVML query child that SIGKILL cannot end at once, as when nvmlInit sleeps
// uninterruptibly in the driver. A task frozen by the cgroup v1 freezer behaves the same
// way (a fatal signal waits until it is thawed), so the test freezes the child and checks
// that kill() does not block, that no second query starts while the child lives, and that
// the child is reaped once it can die.
#include <gtest/gtest.h>
#include <signal.h>

#include <cerrno>
#include <chrono>
#include <cstdlib>
#include <fstream>
#include <string>

#include "nvidia/nvml.h"
#include "support/cgroup_sandbox.h"
#include "support/process.h"

namespace gdw {
namespace {

using namespace std::chrono_literals;

std::string freezer_state(const std::string& dir) {
  std::ifstream in(dir + "/freezer.state");
  std::string state;
  in >> state;
  return state;
}

// Thaws on scope exit so that a failed assertion never leaves a frozen process behind.
class ThawOnExit {
 public:
  explicit ThawOnExit(std::string dir) : dir_(std::move(dir)) {}
  ~ThawOnExit() { test::write_kernel_file(dir_ + "/freezer.state", "THAWED"); }

 private:
  std::string dir_;
};

TEST(NvmlStuckChild, KillDoesNotBlockAndNoSecondQueryStartsUntilTheChildDies) {
  if (!test::CgroupSandbox::available("freezer")) GTEST_SKIP() << "needs root and the cgroup v1 freezer";
  test::CgroupSandbox sandbox("freezer", "nvml");
  ThawOnExit thaw(sandbox.path());
  ::setenv("FAKE_NVML_MODE", "hang", 1);

  auto query = NvmlQuery::start(GDW_BINARY, GDW_FAKE_NVML);
  ASSERT_TRUE(query.ok()) << query.error().message;
  pid_t pid = query->pid();
  ASSERT_EQ(test::move_to_cgroup(sandbox.path(), pid), 0);
  ASSERT_EQ(test::write_kernel_file(sandbox.path("freezer.state"), "FROZEN"), 0);
  ASSERT_TRUE(test::eventually([&] { return freezer_state(sandbox.path()) == "FROZEN"; }, 5s));

  auto begin = std::chrono::steady_clock::now();
  query->kill();
  EXPECT_LT(std::chrono::steady_clock::now() - begin, 1s);
  EXPECT_EQ(::kill(pid, 0), 0) << "the frozen child should still exist";

  auto second = NvmlQuery::start(GDW_BINARY, GDW_FAKE_NVML);
  ASSERT_FALSE(second.ok());
  EXPECT_NE(second.error().message.find("previous one (pid " + std::to_string(pid) + ") is still alive after SIGKILL"),
            std::string::npos)
      << second.error().message;

  ASSERT_EQ(test::write_kernel_file(sandbox.path("freezer.state"), "THAWED"), 0);
  ::setenv("FAKE_NVML_MODE", "ok", 1);
  // The pending SIGKILL ends the child once thawed; the next start() reaps it.
  EXPECT_TRUE(test::eventually([&] { return NvmlQuery::start(GDW_BINARY, GDW_FAKE_NVML).ok(); }, 5s));
  EXPECT_TRUE(::kill(pid, 0) == -1 && errno == ESRCH) << "the child was not reaped";
}

}  // namespace
}  // namespace gdw
