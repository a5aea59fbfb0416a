// The runtime still at work on a create (runtime/create_runtime.h): what its pid file and
// its child's /proc/<pid>/stat say, including a comm made to look like more fields.
#include "runtime/create_runtime.h"

#include <gtest/gtest.h>

#include "support/temp_dir.h"

namespace gdw {
namespace {

TEST(CreateRuntime, APidFileIsOneDecimalPid) {
  EXPECT_EQ(parse_pid_file("4242"), 4242);
  EXPECT_EQ(parse_pid_file("4242\n"), 4242);
  EXPECT_EQ(parse_pid_file(""), std::nullopt);
  EXPECT_EQ(parse_pid_file("0"), std::nullopt);
  EXPECT_EQ(parse_pid_file("-1"), std::nullopt);
  EXPECT_EQ(parse_pid_file("42 43"), std::nullopt);
  EXPECT_EQ(parse_pid_file("42\n\n"), std::nullopt);
  EXPECT_EQ(parse_pid_file("99999999999999999999"), std::nullopt);
}

TEST(CreateRuntime, TheParentIsReadAfterTheLastParenthesisWhateverTheCommHolds) {
  EXPECT_EQ(parse_stat_parent("4242 (sleep) S 4100 4242 4242 0 -1 4194560 97 0"), 4100);
  // A tenant's process may call itself anything, parentheses and numbers included.
  EXPECT_EQ(parse_stat_parent("4242 (a) S 1 2 3 (b)) S 4100 4242 4242 0"), 4100);
  EXPECT_EQ(parse_stat_parent("4242 (x) R  4100 1"), 4100);
  EXPECT_EQ(parse_stat_parent("4242 (x)"), std::nullopt);
  EXPECT_EQ(parse_stat_parent("4242 (x) S"), std::nullopt);
  EXPECT_EQ(parse_stat_parent("4242 (x) S abc 1"), std::nullopt);
  EXPECT_EQ(parse_stat_parent("no parenthesis"), std::nullopt);
}

TEST(CreateRuntime, ReadsTheParentOfThePidFilesProcessUnderTheProcRoot) {
  test::TempDir root("gdw-create-runtime");
  auto write = [&](const std::string& rel, const std::string& text) { root.write(rel, text); };
  write("bundle/init.pid", "300");
  write("proc/300/stat", "300 (sleep) S 200 300 300 0 -1");
  write("proc/200/comm", "runc\n");
  const auto runtime = read_create_runtime(root.path() + "/bundle/init.pid", root.path() + "/proc");
  ASSERT_TRUE(runtime);
  EXPECT_EQ(runtime->pid, 200);
  EXPECT_EQ(runtime->comm, "runc");
  // The runtime gone (its pid no longer in /proc), or the pid file not a pid: nothing named.
  write("proc/300/stat", "300 (sleep) S 201 300 300 0 -1");
  EXPECT_FALSE(read_create_runtime(root.path() + "/bundle/init.pid", root.path() + "/proc"));
  write("bundle/init.pid", "x");
  EXPECT_FALSE(read_create_runtime(root.path() + "/bundle/init.pid", root.path() + "/proc"));
  EXPECT_FALSE(read_create_runtime(root.path() + "/bundle/absent.pid", root.path() + "/proc"));
}

}  // namespace
}  // namespace gdw
