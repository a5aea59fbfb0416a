// The daemon as systemd sees it, without root: a fixture tree of plain directories stands in
// for the cgroup hierarchy. Checks the sd_notify protocol (READY=1 after the first full
// pass, WATCHDOG=1 pings when asked, STOPPING=1 on exit) and that /metrics is valid
// exposition format (promtool check metrics).
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <poll.h>
#include <unistd.h>

#include <chrono>

#include "kubelet/checkpoint.h"
#include "support/metrics_text.h"
#include "support/process.h"
#include "support/temp_dir.h"

namespace gdw::test {
namespace {

class NotifySocket {
 public:
  explicit NotifySocket(const std::string& path) : path_(path) {
    fd_ = ::socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0);
    sockaddr_un addr{};
    addr.sun_family = AF_UNIX;
    std::snprintf(addr.sun_path, sizeof addr.sun_path, "%s", path.c_str());
    ::bind(fd_, reinterpret_cast<sockaddr*>(&addr), sizeof addr);
  }
  ~NotifySocket() { ::close(fd_); }
  // The next datagram, or "" after the timeout.
  std::string receive(std::chrono::milliseconds timeout) {
    pollfd p{fd_, POLLIN, 0};
    if (::poll(&p, 1, static_cast<int>(timeout.count())) <= 0) return {};
    char buf[4096];
    ssize_t n = ::recv(fd_, buf, sizeof buf, 0);
    return n > 0 ? std::string(buf, static_cast<std::size_t>(n)) : std::string();
  }
  // Collects datagrams until one contains `needle`; returns everything seen.
  std::string until(const std::string& needle, std::chrono::milliseconds timeout) {
    std::string all;
    auto end = std::chrono::steady_clock::now() + timeout;
    while (std::chrono::steady_clock::now() < end) {
      std::string m = receive(std::chrono::milliseconds(50));
      all += m + "\n";
      if (m.find(needle) != std::string::npos) break;
    }
    return all;
  }

 private:
  std::string path_;
  int fd_;
};

TEST(DaemonFixture, SpeaksTheSystemdNotifyProtocolAndServesValidMetrics) {
  TempDir dir("gdw-daemon-fixture");
  dir.mkdirs("cgroup/devices/kubepods/burstable");
  dir.write("kubelet/kubelet_internal_checkpoint", write_checkpoint({}, {}));
  dir.mkdirs("proc");
  dir.mkdirs("dev");
  const int port = free_port();
  const std::string config = dir.write(
      "config.yaml", "cgroup:\n  root: " + dir / "cgroup" + "\nkubelet:\n  checkpoint: " +
                         dir / "kubelet/kubelet_internal_checkpoint" + "\nruntime:\n  state_dirs: [" + dir / "run" +
                         "]\ndevices:\n  dev_root: " + dir / "dev" + "\n  proc_root: " + dir / "proc" +
                         "\nmetrics:\n  listen: 127.0.0.1:" + std::to_string(port) + "\nprobe:\n  enabled: false\n");
  NotifySocket notify(dir / "notify.sock");
  BackgroundProcess daemon({GDW_BINARY, "run", "--config", config},
                           {"NOTIFY_SOCKET=" + dir / "notify.sock", "WATCHDOG_USEC=200000"});

  std::string seen = notify.until("READY=1", std::chrono::seconds(10));
  EXPECT_NE(seen.find("READY=1"), std::string::npos) << seen << daemon.output();
  // The watchdog asked for 200 ms: pings arrive at half that.
  int pings = 0;
  auto end = std::chrono::steady_clock::now() + std::chrono::seconds(1);
  while (std::chrono::steady_clock::now() < end)
    if (notify.receive(std::chrono::milliseconds(100)).find("WATCHDOG=1") != std::string::npos) ++pings;
  EXPECT_GE(pings, 4) << daemon.output();

  std::string metrics;
  ASSERT_TRUE(eventually([&] { return !(metrics = http_get(port)).empty(); }));
  EXPECT_EQ(metric_value(metrics, "gpu_devwatch_build_info"), 1);
  EXPECT_EQ(metric_value(metrics, "gpu_devwatch_containers_watched"), 0);
  EXPECT_EQ(metric_value(metrics, "gpu_devwatch_checkpoint_checksum_valid"), 1);
  EXPECT_EQ(metric_value(metrics, "gpu_devwatch_resyncs_total", {{"reason", "startup"}}), 1);
  const std::string file = dir.write("metrics.txt", metrics);
  auto promtool = run_command({"sh", "-c", "promtool check metrics < " + file});
  EXPECT_EQ(promtool.exit_code, 0) << promtool.out << promtool.err << metrics;

  daemon.signal(SIGTERM);
  EXPECT_EQ(daemon.wait(std::chrono::seconds(10)), 0) << daemon.output();
  seen = notify.until("STOPPING=1", std::chrono::seconds(2));
  EXPECT_NE(seen.find("STOPPING=1"), std::string::npos) << seen;
}

TEST(DaemonFixture, WaitsForKubeletInsteadOfExiting) {
  TempDir dir("gdw-daemon-fixture");
  dir.mkdirs("cgroup/devices");
  const int port = free_port();
  const std::string config = dir.write(
      "config.yaml", "cgroup:\n  root: " + dir / "cgroup" + "\nkubelet:\n  checkpoint: " + dir / "ckpt" +
                         "\nmetrics:\n  listen: 127.0.0.1:" + std::to_string(port) + "\nprobe:\n  enabled: false\n" +
                         "daemon:\n  resync_interval: 1s\n");
  BackgroundProcess daemon({GDW_BINARY, "run", "--config", config});
  ASSERT_TRUE(daemon.wait_for_output(" ready")) << daemon.output();
  EXPECT_NE(daemon.output().find("will look again"), std::string::npos) << daemon.output();
  dir.mkdirs("cgroup/devices/kubepods");
  EXPECT_TRUE(daemon.wait_for_output("watching " + dir / "cgroup/devices/kubepods", std::chrono::seconds(5)))
      << daemon.output();
  EXPECT_TRUE(daemon.running());
  daemon.signal(SIGTERM);
  EXPECT_EQ(daemon.wait(std::chrono::seconds(10)), 0);
}

TEST(DaemonFixture, ABadConfigExitsTwoBeforeDoingAnything) {
  TempDir dir("gdw-daemon-fixture");
  auto r = run_command({GDW_BINARY, "run", "--config", dir.write("c.yaml", "metrics:\n  listen: nope\n")});
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.err.find("c.yaml:2: metrics.listen"), std::string::npos) << r.err;
}

}  // namespace
}  // namespace gdw::test
