// The daemon's HTTP endpoint on the real daemon: clients that send half a request and stay
// (or drip bytes) do not keep /metrics and /healthz from answering, and /healthz turns 503
// while the event loop is blocked and 200 when it turns again.
#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstring>
#include <fcntl.h>
#include <fstream>
#include <sstream>
#include <thread>

#include "support/daemon_fixture.h"

namespace gdw::test {
namespace {

using Seconds = std::chrono::duration<double>;


struct Answer {
  int status = 0;  // 0: no answer within the client's timeout
  std::string body;
  double seconds = 0;
};

// GET with a 3 s client timeout: a server that does not answer fails the test instead of
// hanging it.
Answer get(int port, const std::string& path) {
  Answer a;
  const auto start = std::chrono::steady_clock::now();
  int fd = connect_loopback(port);
  if (fd < 0) return a;
  timeval tv{3, 0};
  ::setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
  const std::string req = "GET " + path + " HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n";
  std::string resp;
  if (::write(fd, req.data(), req.size()) == static_cast<ssize_t>(req.size())) {
    char buf[65536];
    for (ssize_t n; (n = ::read(fd, buf, sizeof buf)) > 0;) resp.append(buf, static_cast<std::size_t>(n));
  }
  ::close(fd);
  a.seconds = Seconds(std::chrono::steady_clock::now() - start).count();
  if (resp.rfind("HTTP/1.", 0) == 0 && resp.size() > 12) a.status = std::atoi(resp.c_str() + 9);
  if (auto body = resp.find("\r\n\r\n"); body != std::string::npos) a.body = resp.substr(body + 4);
  return a;
}

std::size_t count(const std::string& text, const std::string& needle) {
  std::size_t n = 0;
  for (auto at = text.find(needle); at != std::string::npos; at = text.find(needle, at + 1)) ++n;
  return n;
}

// Half-sent requests: the request line and part of a header, never the blank line.
std::vector<int> open_half_requests(int port, int n) {
  std::vector<int> fds;
  for (int i = 0; i < n; ++i) {
    int fd = connect_loopback(port);
    if (fd < 0) break;
    const std::string half = "GET /metrics HTTP/1.1\r\nHost: 127.0.0.1\r\nUser-Ag";
    if (::write(fd, half.data(), half.size()) < 0) break;
    fds.push_back(fd);
  }
  return fds;
}

class DaemonHttp : public DaemonWithTrainerTest {
 protected:
  void TearDown() override {
    for (int fd : held_) ::close(fd);
    unblock_config_read();
    DaemonWithTrainerTest::TearDown();
  }
  // A reader blocked on the config FIFO returns once a writer opens and closes it.
  void unblock_config_read() {
    if (fifo_valid_text_.empty()) return;
    int fd = ::open(daemon_->config_path().c_str(), O_WRONLY | O_NONBLOCK | O_CLOEXEC);
    if (fd >= 0) {
      (void)::write(fd, fifo_valid_text_.data(), fifo_valid_text_.size());
      ::close(fd);
    }
    fifo_valid_text_.clear();
  }
  std::vector<int> held_;
  std::string fifo_valid_text_;
};

TEST_F(DaemonHttp, HalfSentRequestsDoNotHoldMetricsOrHealthz) {
  ASSERT_TRUE(daemon_->start()) << daemon_->output();
  held_ = open_half_requests(daemon_->port(), 8);
  ASSERT_EQ(held_.size(), 8u);
  std::this_thread::sleep_for(std::chrono::milliseconds(200));  // the server has them all
  for (int round = 0; round < 3; ++round) {
    auto metrics = get(daemon_->port(), "/metrics");
    EXPECT_EQ(metrics.status, 200) << "round " << round << " after " << metrics.seconds << "s";
    EXPECT_LT(metrics.seconds, 1.0);
    EXPECT_NE(metrics.body.find("gpu_devwatch_containers_watched 1"), std::string::npos) << metrics.body;
    auto health = get(daemon_->port(), "/healthz");
    EXPECT_EQ(health.status, 200) << "round " << round << " after " << health.seconds << "s";
    EXPECT_LT(health.seconds, 1.0);
    EXPECT_EQ(health.body.rfind("ok: event loop last turned", 0), 0u) << health.body;
  }
}

TEST_F(DaemonHttp, DrippingClientsDoNotHoldTheEndpointAndAreCutOff) {
  ASSERT_TRUE(daemon_->start()) << daemon_->output();
  held_ = open_half_requests(daemon_->port(), 8);
  ASSERT_EQ(held_.size(), 8u);
  std::atomic<bool> stop{false};
  std::thread drip([&] {
    while (!stop) {
      for (int fd : held_) (void)::send(fd, "x", 1, MSG_NOSIGNAL);
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
    }
  });
  for (int round = 0; round < 5; ++round) {
    std::this_thread::sleep_for(std::chrono::milliseconds(300));
    auto health = get(daemon_->port(), "/healthz");
    EXPECT_EQ(health.status, 200) << "round " << round;
    EXPECT_LT(health.seconds, 1.0) << "round " << round;
  }
  stop = true;
  drip.join();
  // The server bounds a request's time (3 s): a client still not done by then is dropped.
  for (int fd : held_) {
    timeval tv{6, 0};
    ::setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
    char buf[512];
    ssize_t n = 0;
    while ((n = ::read(fd, buf, sizeof buf)) > 0) {
    }
    EXPECT_TRUE(n == 0 || errno == ECONNRESET) << "still open after the request timeout: " << std::strerror(errno);
  }
}

TEST_F(DaemonHttp, HealthzIs503WhileTheEventLoopIsBlocked) {
  ASSERT_TRUE(daemon_->start()) << daemon_->output();
  ASSERT_EQ(get(daemon_->port(), "/healthz").status, 200);
  const std::string path = daemon_->config_path();
  std::stringstream text;
  text << std::ifstream(path).rdbuf();
  // A 1 s limit (metrics.listen stays the one served).
  std::string config = text.str();
  const auto listen = config.find("  listen: ");
  ASSERT_NE(listen, std::string::npos) << config;
  config.insert(listen, "  health_stale_after: 1s\n");
  std::ofstream(path, std::ios::trunc) << config;
  ::kill(daemon_->process().pid(), SIGHUP);
  ASSERT_TRUE(daemon_->process().wait_for_output("configuration reloaded")) << daemon_->output();
  std::this_thread::sleep_for(std::chrono::milliseconds(1500));
  auto healthy = get(daemon_->port(), "/healthz");
  ASSERT_EQ(healthy.status, 200) << healthy.body << daemon_->output();
  EXPECT_NE(healthy.body.find("(limit 1.000s)"), std::string::npos) << healthy.body;

  // A real stall: the configuration replaced by a FIFO nobody writes, then SIGHUP: the loop
  // blocks in open() reading it, as it would on a hung file system.
  const std::string fifo = path + ".fifo";
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0) << std::strerror(errno);
  ASSERT_EQ(::rename(fifo.c_str(), path.c_str()), 0) << std::strerror(errno);
  fifo_valid_text_ = config;
  const auto blocked_at = std::chrono::steady_clock::now();
  ::kill(daemon_->process().pid(), SIGHUP);
  Answer stalled;
  ASSERT_TRUE(eventually([&] { return (stalled = get(daemon_->port(), "/healthz")).status == 503; }, 5s))
      << stalled.status << " " << stalled.body << daemon_->output();
  EXPECT_GE(Seconds(std::chrono::steady_clock::now() - blocked_at).count(), 0.9) << "not before the limit";
  EXPECT_EQ(stalled.body.rfind("stalled: event loop last turned", 0), 0u) << stalled.body;
  EXPECT_LT(stalled.seconds, 1.0);
  // /metrics is served by other threads: it still answers (and cannot show the stall).
  EXPECT_EQ(get(daemon_->port(), "/metrics").status, 200);

  EXPECT_EQ(count(daemon_->output(), "configuration reloaded"), 1u) << "the loop is still in the read";
  unblock_config_read();  // the loop reads the config and turns again
  ASSERT_TRUE(eventually([&] { return count(daemon_->output(), "configuration reloaded") == 2; }, 5s))
      << daemon_->output();
  EXPECT_TRUE(eventually([&] { return get(daemon_->port(), "/healthz").status == 200; }, 2s)) << daemon_->output();
  // Back to a regular file, so the daemon's exit is unaffected.
  std::ofstream(path + ".new") << config;
  ASSERT_EQ(::rename((path + ".new").c_str(), path.c_str()), 0);
}

}  // namespace
}  // namespace gdw::test
