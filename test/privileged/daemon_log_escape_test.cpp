// A writer's comm is tenant input: one with a newline must not forge a log line in the
// daemon's text (stderr) log. The repair line names it escaped, on one line.
#include <gtest/gtest.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <fcntl.h>
#include <sstream>

#include "support/daemon_fixture.h"

namespace gdw::test {
namespace {

// 15 bytes: what fits in a comm.
constexpr char kEvilComm[] = "x\nWARN forged";


using DaemonLog = DaemonWithTrainerTest;

TEST_F(DaemonLog, ANewlineInAWritersCommCannotForgeALogLine) {
  const auto& c = *c_;
  ASSERT_TRUE(daemon_->start("", /*probe=*/true)) << daemon_->output();
  if (daemon_->metric("gpu_devwatch_probe_loaded") != 1) GTEST_SKIP() << "the eBPF probe could not load:\n" << daemon_->output();

  ASSERT_TRUE(SandboxNode::reapply_as_old_runc(c, kEvilComm));
  EXPECT_TRUE(daemon_->eventually_errno(c, "nvidia0", ENXIO)) << daemon_->output();
  // The repair line names the writer, its comm escaped.
  EXPECT_TRUE(daemon_->process().wait_for_output("comm x\\nWARN forged")) << daemon_->output();
  std::istringstream lines(daemon_->output());
  std::size_t n = 0;
  for (std::string line; std::getline(lines, line);) {
    if (line.find("WARN forged") == std::string::npos) continue;
    ++n;
    EXPECT_NE(line.rfind("WARN forged", 0), 0u) << "forged line: " << line;
    // Only ever inside one of the daemon's lines (timestamp first), escaped.
    EXPECT_TRUE(line.size() > 20 && line[4] == '-' && line[10] == 'T') << "not a daemon log line: " << line;
    EXPECT_NE(line.find("comm x\\nWARN forged"), std::string::npos) << line;
  }
  EXPECT_GE(n, 1u);
  EXPECT_EQ(daemon_->stop(), 0) << daemon_->output();
}

}  // namespace
}  // namespace gdw::test
