// metrics.web_config over real TLS: certificates made by the test (openssl CLI), the HTTP
// server started from a web config file as the daemon does, and curl as the scraper.
#include <arpa/inet.h>
#include <crypt.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <string>
#include <vector>

#include "metrics/http_server.h"
#include "metrics/metrics_access.h"
#include "support/process.h"
#include "support/temp_dir.h"
#include "support/test_pki.h"

namespace gdw {
namespace {

using Seconds = std::chrono::duration<double>;

std::string bcrypt(const std::string& password) {
  char setting[CRYPT_GENSALT_OUTPUT_SIZE];
  crypt_gensalt_rn("$2y$", 5, nullptr, 0, setting, sizeof setting);
  crypt_data data{};
  return crypt_rn(password.c_str(), setting, &data, sizeof data);
}

struct CurlAnswer {
  int exit_code = -1;
  int status = 0;  // 0: no HTTP answer
  std::string text;  // headers and body
};

CurlAnswer curl(std::vector<std::string> args) {
  std::vector<std::string> argv{"curl", "-sS", "--max-time", "5", "-D", "-", "-w", "\n%{http_code}"};
  argv.insert(argv.end(), args.begin(), args.end());
  auto r = test::run_command(argv, std::chrono::seconds(15));
  CurlAnswer a;
  a.exit_code = r.exit_code;
  const auto nl = r.out.rfind('\n');
  a.status = nl == std::string::npos ? 0 : std::atoi(r.out.c_str() + nl + 1);
  a.text = r.out.substr(0, nl == std::string::npos ? 0 : nl) + r.err;
  return a;
}

class HttpsMetrics : public ::testing::Test {
 protected:
  void SetUp() override {
    const std::string error = test::make_test_pki(dir_.path(), pki_);
    ASSERT_EQ(error, "");
    port_ = test::free_port();
    base_ = "https://127.0.0.1:" + std::to_string(port_);
  }
  // Writes `web_config` and serves /metrics and /healthz with it, as the daemon does.
  void serve(const std::string& web_config) {
    auto access = load_metrics_access(dir_.write("web.yml", web_config));
    ASSERT_TRUE(access.ok()) << access.error().message;
    HttpServerOptions options;
    options.threads = 4;
    options.request_timeout = std::chrono::milliseconds(1000);
    options.tls = access->tls;
    options.basic_auth = access->basic_auth;
    options.unauthenticated_paths = {"/healthz"};
    auto s = HttpServer::start("127.0.0.1:" + std::to_string(port_),
                               {{"/metrics", [] { return HttpResponse{200, "text/plain", "gpu_devwatch_up 1\n"}; }},
                                {"/healthz", [] { return HttpResponse{200, "text/plain", "ok\n"}; }}},
                               options);
    ASSERT_TRUE(s.ok()) << s.error().message;
    server_ = std::move(*s);
  }
  std::string tls_config(const std::string& client_auth = "") const {
    std::string text = "tls_server_config:\n  cert_file: server.crt\n  key_file: " + pki_.server_key + "\n";
    if (!client_auth.empty()) text += "  client_auth_type: " + client_auth + "\n  client_ca_file: ca.crt\n";
    return text;
  }
  test::TempDir dir_{"gdw-https"};
  test::TestPki pki_;
  int port_ = 0;
  std::string base_;
  std::unique_ptr<HttpServer> server_;
};

TEST_F(HttpsMetrics, ServesOverTlsVerifiedAgainstTheCaAndRefusesPlainHttp) {
  serve(tls_config());
  const auto ok = curl({"--cacert", pki_.ca_crt, base_ + "/metrics"});
  EXPECT_EQ(ok.status, 200) << ok.text;
  EXPECT_NE(ok.text.find("gpu_devwatch_up 1"), std::string::npos) << ok.text;
  const auto by_name = curl({"--cacert", pki_.ca_crt, "https://localhost:" + std::to_string(port_) + "/metrics"});
  EXPECT_EQ(by_name.status, 200) << by_name.text;

  const auto untrusted = curl({base_ + "/metrics"});  // the system CAs do not know ours
  EXPECT_NE(untrusted.exit_code, 0);
  EXPECT_EQ(untrusted.status, 0) << untrusted.text;

  const auto plain = curl({"http://127.0.0.1:" + std::to_string(port_) + "/metrics"});
  EXPECT_NE(plain.exit_code, 0) << plain.text;
  EXPECT_EQ(plain.status, 0) << plain.text;
  EXPECT_EQ(plain.text.find("gpu_devwatch_up"), std::string::npos) << plain.text;
  EXPECT_EQ(curl({"--cacert", pki_.ca_crt, base_ + "/metrics"}).status, 200) << "still serving after the plain client";
}

TEST_F(HttpsMetrics, BasicAuthChallengesWrongOrMissingCredentialsButNotHealthz) {
  serve(tls_config() + "basic_auth_users:\n  prometheus: " + bcrypt("right horse") + "\n");
  const auto none = curl({"--cacert", pki_.ca_crt, base_ + "/metrics"});
  EXPECT_EQ(none.status, 401) << none.text;
  EXPECT_NE(none.text.find("WWW-Authenticate: Basic"), std::string::npos) << none.text;
  EXPECT_EQ(none.text.find("gpu_devwatch_up"), std::string::npos);
  const auto wrong = curl({"--cacert", pki_.ca_crt, "-u", "prometheus:wrong horse", base_ + "/metrics"});
  EXPECT_EQ(wrong.status, 401) << wrong.text;
  const auto stranger = curl({"--cacert", pki_.ca_crt, "-u", "mallory:right horse", base_ + "/metrics"});
  EXPECT_EQ(stranger.status, 401) << stranger.text;
  const auto right = curl({"--cacert", pki_.ca_crt, "-u", "prometheus:right horse", base_ + "/metrics"});
  EXPECT_EQ(right.status, 200) << right.text;
  EXPECT_NE(right.text.find("gpu_devwatch_up 1"), std::string::npos) << right.text;
  const auto health = curl({"--cacert", pki_.ca_crt, base_ + "/healthz"});
  EXPECT_EQ(health.status, 200) << "the kubelet's probe sends no credentials: " << health.text;
}

TEST_F(HttpsMetrics, BasicAuthWorksOnPlainHttpToo) {
  serve("basic_auth_users:\n  prometheus: " + bcrypt("pw") + "\n");
  const std::string url = "http://127.0.0.1:" + std::to_string(port_) + "/metrics";
  const auto none = curl({url});
  EXPECT_EQ(none.status, 401) << none.text;
  EXPECT_NE(none.text.find("WWW-Authenticate: Basic"), std::string::npos) << none.text;
  EXPECT_EQ(curl({"-u", "prometheus:nope", url}).status, 401);
  EXPECT_EQ(curl({"-u", "prometheus:pw", url}).status, 200);
}

TEST_F(HttpsMetrics, RequireAndVerifyClientCertAdmitsOnlyCertificatesFromTheClientCa) {
  serve(tls_config("RequireAndVerifyClientCert"));
  const auto without = curl({"--cacert", pki_.ca_crt, base_ + "/metrics"});
  EXPECT_NE(without.exit_code, 0) << without.text;
  EXPECT_NE(without.status, 200) << without.text;
  EXPECT_EQ(without.text.find("gpu_devwatch_up"), std::string::npos) << without.text;
  const auto rogue = curl({"--cacert", pki_.ca_crt, "--cert", pki_.rogue_crt, "--key", pki_.rogue_key, base_ + "/metrics"});
  EXPECT_NE(rogue.status, 200) << rogue.text;
  EXPECT_EQ(rogue.text.find("gpu_devwatch_up"), std::string::npos) << rogue.text;
  const auto with = curl({"--cacert", pki_.ca_crt, "--cert", pki_.client_crt, "--key", pki_.client_key, base_ + "/metrics"});
  EXPECT_EQ(with.status, 200) << with.text;
}

TEST_F(HttpsMetrics, VerifyClientCertIfGivenAcceptsNoneButRejectsAnUntrustedOne) {
  serve(tls_config("VerifyClientCertIfGiven"));
  EXPECT_EQ(curl({"--cacert", pki_.ca_crt, base_ + "/metrics"}).status, 200);
  const auto rogue = curl({"--cacert", pki_.ca_crt, "--cert", pki_.rogue_crt, "--key", pki_.rogue_key, base_ + "/metrics"});
  EXPECT_NE(rogue.status, 200) << rogue.text;
}

TEST_F(HttpsMetrics, ClientsThatNeverHandshakeAreCutOffAndDoNotBlockTheScraper) {
  serve(tls_config());
  std::vector<int> idle;  // twice as many as workers, each sending nothing
  for (int i = 0; i < 8; ++i) {
    int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_port = htons(static_cast<std::uint16_t>(port_));
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    ASSERT_EQ(::connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr), 0);
    timeval tv{10, 0};
    ::setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
    idle.push_back(fd);
  }
  const auto start = std::chrono::steady_clock::now();
  EXPECT_EQ(curl({"--cacert", pki_.ca_crt, base_ + "/metrics"}).status, 200);
  EXPECT_LT(Seconds(std::chrono::steady_clock::now() - start).count(), 3.5);
  for (int fd : idle) {
    char buf[64];
    EXPECT_EQ(::read(fd, buf, sizeof buf), 0) << "the server closed it (not our 10 s read timeout)";
    ::close(fd);
  }
}

TEST_F(HttpsMetrics, BadFilesAreErrorsNamingTheFile) {
  auto missing = load_metrics_access(dir_.write("a.yml", "tls_server_config: {cert_file: nope.crt, key_file: server.key}\n"));
  ASSERT_FALSE(missing.ok());
  EXPECT_NE(missing.error().message.find(dir_ / "nope.crt"), std::string::npos) << missing.error().message;
  auto mismatched = load_metrics_access(dir_.write("b.yml", "tls_server_config: {cert_file: server.crt, key_file: client.key}\n"));
  ASSERT_FALSE(mismatched.ok());
  EXPECT_NE(mismatched.error().message.find("client.key"), std::string::npos) << mismatched.error().message;
  auto bad_ca = load_metrics_access(dir_.write(
      "c.yml", "tls_server_config: {cert_file: server.crt, key_file: server.key, client_ca_file: web.yml, "
               "client_auth_type: RequireAndVerifyClientCert}\n"));
  EXPECT_FALSE(bad_ca.ok());
  auto unsupported = load_metrics_access(dir_.write("d.yml", "http_server_config: {http2: true}\n"));
  ASSERT_FALSE(unsupported.ok());
  EXPECT_NE(unsupported.error().message.find(dir_ / "d.yml"), std::string::npos) << unsupported.error().message;
  EXPECT_NE(unsupported.error().message.find("http_server_config"), std::string::npos) << unsupported.error().message;
}

}  // namespace
}  // namespace gdw
