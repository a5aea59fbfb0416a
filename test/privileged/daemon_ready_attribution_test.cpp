// Attribution from READY=1 on: a revocation written the moment systemd hears READY=1 is
// repaired and its writer named (log line and gpu_devwatch_revocations_total), as later
// ones are. READY is taken from the sd_notify socket itself, not from the log line, so the
// revocation lands within microseconds of the notification. The GPU container is known
// from the checkpoint, or only from kubelet's PodResources API (a real gRPC server here):
// READY=1 used to come before PodResources' first answer, and a revocation in between was
// repaired (once the answer made it a GPU container) but named no writer.
#include <gtest/gtest.h>
#include <poll.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <ostream>

#include "support/daemon_harness.h"
#include "support/kubelet_grpc_fakes.h"

namespace gdw::test {
namespace {

// The receiving end of $NOTIFY_SOCKET, as systemd holds it.
class NotifySocket {
 public:
  explicit NotifySocket(const std::string& path) {
    fd_ = ::socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0);
    sockaddr_un addr{};
    addr.sun_family = AF_UNIX;
    std::snprintf(addr.sun_path, sizeof addr.sun_path, "%s", path.c_str());
    ok_ = fd_ >= 0 && ::bind(fd_, reinterpret_cast<sockaddr*>(&addr), sizeof addr) == 0;
  }
  ~NotifySocket() { ::close(fd_); }
  bool ok() const { return ok_; }
  // Waits for a datagram containing READY=1; false after the timeout.
  bool wait_ready(std::chrono::milliseconds timeout) {
    const auto end = std::chrono::steady_clock::now() + timeout;
    while (std::chrono::steady_clock::now() < end) {
      pollfd p{fd_, POLLIN, 0};
      if (::poll(&p, 1, 50) <= 0) continue;
      char buf[4096];
      const ssize_t n = ::recv(fd_, buf, sizeof buf, 0);
      if (n > 0 && std::string(buf, static_cast<std::size_t>(n)).find("READY=1") != std::string::npos) return true;
    }
    return false;
  }

 private:
  int fd_ = -1;
  bool ok_ = false;
};


struct Scenario {
  const char* name;
  bool in_checkpoint;
  friend void PrintTo(const Scenario& s, std::ostream* os) { *os << s.name; }
};

class DaemonReadyAttribution : public ::testing::TestWithParam<Scenario> {};

TEST_P(DaemonReadyAttribution, ARevocationRightAfterReadyIsNamed) {
  if (!SandboxNode::available()) GTEST_SKIP() << "needs root and a writable cgroup v1 devices hierarchy";
  warm_up_grpc_client();
  constexpr int kRounds = 4;
  for (int round = 0; round < kRounds; ++round) {
    SCOPED_TRACE("round " + std::to_string(round));
    SandboxNode node;
    const auto& c = node.add_container({.pod_namespace = "ml", .pod_name = "trainer-0", .container_name = "trainer",
                                        .device_ids = {node.gpu_uuid(0)}, .in_checkpoint = GetParam().in_checkpoint});
    node.write_checkpoint();
    FakePodResources kubelet(node.pod_resources_socket());
    kubelet.set_response(one_container_listing("ml", "trainer-0", "trainer", node.gpu_uuid(0)));
    TempDir dir("gdw-notify");
    NotifySocket notify(dir / "notify.sock");
    ASSERT_TRUE(notify.ok());
    const int port = free_port();
    const std::string config = node.write_config("metrics:\n  listen: 127.0.0.1:" + std::to_string(port) +
                                                 "\nprobe:\n  enabled: true\nlog:\n  level: debug\n");
    BackgroundProcess daemon({GDW_BINARY, "run", "--config", config}, {"NOTIFY_SOCKET=" + dir / "notify.sock"});
    ASSERT_TRUE(notify.wait_ready(std::chrono::seconds(15))) << daemon.output();
    // At once: the revoker runs while the daemon is still finishing its start.
    ASSERT_TRUE(SandboxNode::reapply_as_old_runc(c, "runc"));

    EXPECT_TRUE(eventually([&] { return node.open_errno(c, "nvidia0") == ENXIO; }, std::chrono::seconds(3)))
        << daemon.output();
    std::string metrics;
    ASSERT_TRUE(eventually([&] { return !(metrics = http_get(port)).empty(); })) << daemon.output();
    if (metric_value(metrics, "gpu_devwatch_probe_loaded") != 1)
      GTEST_SKIP() << "the eBPF probe could not load here:\n" << daemon.output();
    EXPECT_TRUE(daemon.wait_for_output("revoked by runc (pid", std::chrono::seconds(3))) << daemon.output();
    EXPECT_NE(daemon.output().find("writer=runc"), std::string::npos) << daemon.output();
    EXPECT_TRUE(eventually([&] {
      return metric_value(http_get(port), "gpu_devwatch_revocations_total", {{"writer", "runc"}}).value_or(0) >= 1;
    }, std::chrono::seconds(2))) << http_get(port) << daemon.output();
    daemon.signal(SIGTERM);
    EXPECT_EQ(daemon.wait(std::chrono::seconds(10)), 0) << daemon.output();
    if (HasFailure()) break;
  }
}

INSTANTIATE_TEST_SUITE_P(, DaemonReadyAttribution,
                         ::testing::Values(Scenario{"KnownFromTheCheckpoint", true},
                                           Scenario{"KnownOnlyFromPodResources", false}),
                         [](const auto& info) { return std::string(info.param.name); });

// READY=1 waits for PodResources' first outcome, but never longer than its deadline: a
// kubelet that does not answer delays it by pod_resources_timeout at most.
TEST(DaemonReadyWithAHungKubelet, ReadyComesWithinThePodResourcesDeadline) {
  if (!SandboxNode::available()) GTEST_SKIP() << "needs root and a writable cgroup v1 devices hierarchy";
  warm_up_grpc_client();
  SandboxNode node;
  node.add_container({.pod_name = "p", .container_name = "c", .device_ids = {node.gpu_uuid(0)}});
  node.write_checkpoint();
  FakePodResources kubelet(node.pod_resources_socket());
  kubelet.set_delay(std::chrono::seconds(30));
  TempDir dir("gdw-notify");
  NotifySocket notify(dir / "notify.sock");
  ASSERT_TRUE(notify.ok());
  const std::string config = node.write_config("", "  pod_resources_timeout: 500ms\n");
  const auto start = std::chrono::steady_clock::now();
  BackgroundProcess daemon({GDW_BINARY, "run", "--config", config}, {"NOTIFY_SOCKET=" + dir / "notify.sock"});
  ASSERT_TRUE(notify.wait_ready(std::chrono::seconds(10))) << daemon.output();
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(5)) << daemon.output();
  daemon.signal(SIGTERM);
  EXPECT_EQ(daemon.wait(std::chrono::seconds(10)), 0) << daemon.output();
}

}  // namespace
}  // namespace gdw::test
