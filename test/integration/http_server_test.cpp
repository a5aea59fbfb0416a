// The metrics HTTP server on loopback: routes, methods, errors, and clients that never
// finish a request (they are cut off; they do not hold the server).
#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <stdexcept>
#include <string>
#include <vector>

#include "metrics/http_server.h"
#include "support/process.h"

namespace gdw {
namespace {

using Seconds = std::chrono::duration<double>;

int connect_loopback(int port) { return test::connect_loopback(port, 10); }

// The whole answer to `request` ("" when none came).
std::string round_trip(int port, const std::string& request) {
  int fd = connect_loopback(port);
  if (fd < 0) return {};
  std::string answer;
  if (::write(fd, request.data(), request.size()) == static_cast<ssize_t>(request.size())) {
    char buf[4096];
    for (ssize_t n; (n = ::read(fd, buf, sizeof buf)) > 0;) answer.append(buf, static_cast<std::size_t>(n));
  }
  ::close(fd);
  return answer;
}

class HttpServerTest : public ::testing::Test {
 protected:
  void SetUp() override {
    port_ = test::free_port();
    HttpServerOptions options;
    options.threads = 4;
    options.request_timeout = std::chrono::milliseconds(1000);
    auto s = HttpServer::start("127.0.0.1:" + std::to_string(port_),
                               {{"/ok", [] { return HttpResponse{200, "text/plain", "fine\n"}; }},
                                {"/down", [] { return HttpResponse{503, "text/plain", "stalled\n"}; }},
                                {"/throws", []() -> HttpResponse { throw std::runtime_error("boom"); }}},
                               options);
    ASSERT_TRUE(s.ok()) << s.error().message;
    server_ = std::move(*s);
  }
  std::string get(const std::string& path, const std::string& method = "GET") {
    return round_trip(port_, method + " " + path + " HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n");
  }
  int port_ = 0;
  std::unique_ptr<HttpServer> server_;
};

TEST_F(HttpServerTest, RoutesAnswerWithTheirStatusAndBody) {
  const auto ok = get("/ok");
  EXPECT_EQ(ok.rfind("HTTP/1.1 200", 0), 0u) << ok;
  EXPECT_NE(ok.find("Content-Length: 5\r\n"), std::string::npos) << ok;
  EXPECT_EQ(ok.substr(ok.size() - 5), "fine\n");
  const auto down = get("/down");
  EXPECT_EQ(down.rfind("HTTP/1.1 503", 0), 0u) << down;
  EXPECT_EQ(down.substr(down.size() - 8), "stalled\n");
}

TEST_F(HttpServerTest, UnknownPathsMethodsAndHandlerErrorsAreAnswered) {
  EXPECT_EQ(get("/nope").rfind("HTTP/1.1 404", 0), 0u);
  EXPECT_EQ(get("/ok/deeper").rfind("HTTP/1.1 404", 0), 0u);
  EXPECT_EQ(get("/ok", "POST").rfind("HTTP/1.1 405", 0), 0u);
  const auto head = get("/ok", "HEAD");
  EXPECT_EQ(head.rfind("HTTP/1.1 200", 0), 0u) << head;
  EXPECT_EQ(head.find("fine"), std::string::npos) << "HEAD has no body";
  const auto thrown = get("/throws");
  EXPECT_EQ(thrown.rfind("HTTP/1.1 500", 0), 0u) << thrown;
  EXPECT_EQ(get("/ok").rfind("HTTP/1.1 200", 0), 0u) << "still serving after a handler threw";
}

TEST_F(HttpServerTest, MoreIdleClientsThanWorkersAreCutOffAtTheRequestTimeout) {
  // Twice as many half-sent requests as workers: each is dropped after the timeout (1 s),
  // so a real request waits at most two rounds of it, never for as long as they stay open.
  std::vector<int> idle;
  for (int i = 0; i < 8; ++i) {
    int fd = connect_loopback(port_);
    ASSERT_GE(fd, 0);
    ASSERT_EQ(::write(fd, "GET /ok HTTP/1.1\r\nHo", 20), 20);
    idle.push_back(fd);
  }
  const auto start = std::chrono::steady_clock::now();
  EXPECT_EQ(get("/ok").rfind("HTTP/1.1 200", 0), 0u);
  EXPECT_LT(Seconds(std::chrono::steady_clock::now() - start).count(), 3.5);
  for (int fd : idle) {
    char buf[512];
    ssize_t n = 0;
    while ((n = ::read(fd, buf, sizeof buf)) > 0) {
    }
    EXPECT_GE(n, 0) << "the server closed it (no read timeout on our side)";
    ::close(fd);
  }
}

TEST(HttpServer, APortInUseIsAnError) {
  const int port = test::free_port();
  auto first = HttpServer::start("127.0.0.1:" + std::to_string(port), {});
  ASSERT_TRUE(first.ok()) << first.error().message;
  auto second = HttpServer::start("127.0.0.1:" + std::to_string(port), {});
  ASSERT_FALSE(second.ok());
  EXPECT_NE(second.error().message.find(std::to_string(port)), std::string::npos) << second.error().message;
}

}  // namespace
}  // namespace gdw
