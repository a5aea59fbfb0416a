// The eBPF probe on the real kernel: loading it (and what an unprivileged load says), cgroup
// mkdir/rmdir and its statistics. Rule writes, denied opens and device programs have their
// own files (privileged/probe_rule_writes_test.cpp, probe_denied_opens_test.cpp,
// probe_device_programs_test.cpp). Other test runs may share the kernel, so every assertion
// only looks at events from this test's own processes and cgroups.
#include <bpf/bpf.h>
#include <fcntl.h>
#include <linux/bpf.h>
#include <poll.h>
#include <grp.h>
#include <linux/capability.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <sys/uio.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstring>
#include <functional>
#include <optional>
#include <string>
#include <thread>
#include <tuple>
#include <vector>

#include <gtest/gtest.h>

#include "probe/probe.h"
#include "support/cgroup_sandbox.h"
#include "support/probe_event_log.h"
#include "support/probe_fixture.h"
#include "support/process.h"
#include "support/temp_dir.h"

namespace gdw {
namespace {

using test::CgroupSandbox;
using test::inode_of;
using test::ProbeTest;

TEST(ProbeLoad, WithoutPrivilegeSaysWhatIsMissing) {
  if (!test::is_root()) GTEST_SKIP() << "needs root to start a child as an unprivileged user";
  int report[2];
  ASSERT_EQ(::pipe2(report, O_CLOEXEC), 0);
  pid_t pid = ::fork();
  if (pid == 0) {
    constexpr uid_t kNobody = 65534;
    if (::setgroups(0, nullptr) != 0 || ::setresgid(kNobody, kNobody, kNobody) != 0 ||
        ::setresuid(kNobody, kNobody, kNobody) != 0) {
      _exit(2);
    }
    auto loaded = Probe::load();
    std::string message = loaded ? "loaded" : loaded.error().message;
    (void)!::write(report[1], message.data(), message.size());
    _exit(0);
  }
  ::close(report[1]);
  std::string message;
  char buffer[512];
  for (ssize_t n; (n = ::read(report[0], buffer, sizeof(buffer))) > 0;) message.append(buffer, n);
  ::close(report[0]);
  int status = 0;
  ::waitpid(pid, &status, 0);
  ASSERT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << "could not drop privileges";
  EXPECT_NE(message.find("permission denied"), std::string::npos) << message;
  EXPECT_NE(message.find("CAP_BPF"), std::string::npos) << message;
}

// ---- cgroup lifecycle -----------------------------------------------------------------------

TEST_F(ProbeTest, CgroupMkdirAndRmdir) {
  for (const char* hierarchy : {"devices", "unified"}) {
    SCOPED_TRACE(hierarchy);
    if (!CgroupSandbox::available(hierarchy)) continue;
    CgroupSandbox sandbox(hierarchy, "probe-life");
    std::string dir = sandbox.make("pod");
    std::uint64_t id = inode_of(dir);
    std::string rel = "/" + sandbox.name() + "/pod";
    sandbox.remove("pod");

    auto created = log_->wait_for<CgroupLifecycleEvent>(
        [&](const CgroupLifecycleEvent& e) { return e.created && e.cgroup_id == id && e.path == rel; });
    ASSERT_TRUE(created);
    EXPECT_EQ(created->level, 2);
    auto removed = log_->wait_for<CgroupLifecycleEvent>(
        [&](const CgroupLifecycleEvent& e) { return !e.created && e.cgroup_id == id && e.path == rel; });
    ASSERT_TRUE(removed);
    EXPECT_EQ(removed->hierarchy_id, created->hierarchy_id);
  }
}

TEST_F(ProbeTest, StatsCountDeliveredEventsAndNoDrops) {
  // v1's devices hierarchy, or cgroup2 where there is no v1 (a pure v2 host).
  CgroupSandbox sandbox(CgroupSandbox::available("devices") ? "devices" : "unified", "probe-stats");
  std::string dir = sandbox.make("a");
  std::uint64_t id = inode_of(dir);
  ASSERT_TRUE(log_->wait_for<CgroupLifecycleEvent>([&](const CgroupLifecycleEvent& e) { return e.cgroup_id == id; }));
  ProbeStats stats = probe_->stats();
  EXPECT_GE(stats.events, 1u);
  EXPECT_EQ(stats.ring_buffer_drops, 0u);
}

}  // namespace
}  // namespace gdw
