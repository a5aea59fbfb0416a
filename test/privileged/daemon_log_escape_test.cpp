// A writer's comm is tenant input: one with a newline must not forge a log line in the
// daemon's text (stderr) log. The repair line names it escaped, on one line.
#include <gtest/gtest.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <fcntl.h>
#include <sstream>

#include "support/daemon_harness.h"

namespace gdw::test {
namespace {

// 15 bytes: what fits in a comm.
constexpr char kEvilComm[] = "x\nWARN forged";


TEST(DaemonLog, ANewlineInAWritersCommCannotForgeALogLine) {
  if (!SandboxNode::available()) GTEST_SKIP() << "needs root and a writable cgroup v1 devices hierarchy";
  SandboxNode node;
  const auto& c = node.add_container({.pod_namespace = "ml", .pod_name = "trainer-0", .container_name = "trainer",
                                      .device_ids = {node.gpu_uuid(0)}});
  node.write_checkpoint();
  DaemonHarness daemon(node);
  ASSERT_TRUE(daemon.start("", /*probe=*/true)) << daemon.output();
  if (daemon.metric("gpu_devwatch_probe_loaded") != 1) GTEST_SKIP() << "the eBPF probe could not load:\n" << daemon.output();

  ASSERT_TRUE(SandboxNode::reapply_as_old_runc(c, kEvilComm));
  EXPECT_TRUE(daemon.eventually_errno(c, "nvidia0", ENXIO)) << daemon.output();
  // The repair line names the writer, its comm escaped.
  EXPECT_TRUE(daemon.process().wait_for_output("comm x\\nWARN forged")) << daemon.output();
  std::istringstream lines(daemon.output());
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
  EXPECT_EQ(daemon.stop(), 0) << daemon.output();
}

}  // namespace
}  // namespace gdw::test
