// Who wrote a rule: the writer's executable is read once per process (pid + start time)
// and a reused pid is read afresh (service/writer_executables.h), on this machine's /proc.
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <filesystem>

#include "service/writer_executables.h"
#include "support/temp_dir.h"

namespace gdw {
namespace {

ProcessInfo process(pid_t pid, std::uint64_t start) {
  ProcessInfo p;
  p.pid = pid;
  p.start_time_ns = start;
  return p;
}

TEST(WriterExecutables, ReadsTheExecutableOfALiveProcess) {
  WriterExecutables exes;
  EXPECT_EQ(exes.of(process(::getpid(), 1)), std::filesystem::read_symlink("/proc/self/exe").string());
}

// A proc root of our own: the executable link can be changed under the same pid.
class WriterExecutablesFixture : public ::testing::Test {
 protected:
  void link_exe(pid_t pid, const std::string& target) {
    const std::string dir = tmp_ / std::to_string(pid);
    std::filesystem::create_directories(dir);
    std::filesystem::remove(dir + "/exe");
    std::filesystem::create_symlink(target, dir + "/exe");
  }
  test::TempDir tmp_;
};

TEST_F(WriterExecutablesFixture, TheSameProcessIsReadOnceAReusedPidAgain) {
  WriterExecutables exes;
  link_exe(77, "/usr/bin/runc");
  EXPECT_EQ(exes.of(process(77, 1000), tmp_.path()), "/usr/bin/runc");
  link_exe(77, "/tmp/tenant-binary");  // pid 77 exited and was reused
  EXPECT_EQ(exes.of(process(77, 1000), tmp_.path()), "/usr/bin/runc") << "the same process: kept";
  EXPECT_EQ(exes.of(process(77, 2000), tmp_.path()), "/tmp/tenant-binary") << "another start time: another process";
  EXPECT_EQ(exes.of(process(77, 0), tmp_.path()), "/tmp/tenant-binary") << "no start time: always read";
}

TEST_F(WriterExecutablesFixture, AGoneProcessIsNotKeptAndTheOldestGoesFirst) {
  WriterExecutables exes(2);
  EXPECT_EQ(exes.of(process(5, 1), tmp_.path()), "") << "gone";
  link_exe(5, "/usr/bin/crun");
  EXPECT_EQ(exes.of(process(5, 1), tmp_.path()), "/usr/bin/crun") << "a failed read was not kept";
  link_exe(6, "/a");
  link_exe(7, "/b");
  EXPECT_EQ(exes.of(process(6, 1), tmp_.path()), "/a");
  EXPECT_EQ(exes.of(process(7, 1), tmp_.path()), "/b");  // pid 5 leaves: capacity 2
  link_exe(5, "/usr/bin/other");
  EXPECT_EQ(exes.of(process(5, 1), tmp_.path()), "/usr/bin/other");
  link_exe(7, "/changed");
  EXPECT_EQ(exes.of(process(7, 1), tmp_.path()), "/b") << "still kept";
}

}  // namespace
}  // namespace gdw
