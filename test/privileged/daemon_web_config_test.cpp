// metrics.web_config on the real daemon: a SIGHUP switches /metrics to HTTPS with basic
// auth (certificates made by the test), /healthz stays open for the kubelet's probe, a bad
// web config on SIGHUP keeps the running one, and a bad one at start stops the daemon.
#include <crypt.h>
#include <gtest/gtest.h>
#include <signal.h>

#include <fstream>
#include <sstream>

#include "support/daemon_harness.h"
#include "support/temp_dir.h"
#include "support/test_pki.h"

namespace gdw::test {
namespace {

std::string bcrypt(const std::string& password) {
  char setting[CRYPT_GENSALT_OUTPUT_SIZE];
  crypt_gensalt_rn("$2y$", 5, nullptr, 0, setting, sizeof setting);
  crypt_data data{};
  return crypt_rn(password.c_str(), setting, &data, sizeof data);
}

// curl's HTTP status (0: no HTTP answer) and output.
std::pair<int, std::string> curl(std::vector<std::string> args) {
  std::vector<std::string> argv{"curl", "-sS", "--max-time", "5", "-D", "-", "-w", "\n%{http_code}"};
  argv.insert(argv.end(), args.begin(), args.end());
  auto r = run_command(argv, std::chrono::seconds(15));
  const auto nl = r.out.rfind('\n');
  return {nl == std::string::npos ? 0 : std::atoi(r.out.c_str() + nl + 1), r.out + r.err};
}

TEST(DaemonWebConfig, SighupServesHttpsWithBasicAuthAndKeepsItWhenTheNextOneIsBad) {
  if (!SandboxNode::available()) GTEST_SKIP() << "needs root and a writable cgroup v1 devices hierarchy";
  SandboxNode node;
  node.write_checkpoint();
  DaemonHarness daemon(node);
  ASSERT_TRUE(daemon.start()) << daemon.output();
  const std::string port = std::to_string(daemon.port());
  ASSERT_EQ(curl({"http://127.0.0.1:" + port + "/metrics"}).first, 200);

  TempDir dir("gdw-webcfg");
  TestPki pki;
  ASSERT_EQ(make_test_pki(dir.path(), pki), "");
  const std::string web = dir.write("web.yml", "tls_server_config:\n  cert_file: server.crt\n  key_file: server.key\n"
                                               "basic_auth_users:\n  prometheus: " + bcrypt("s3cret") + "\n");
  std::stringstream text;
  text << std::ifstream(daemon.config_path()).rdbuf();
  std::string config = text.str();
  const auto listen = config.find("  listen: ");
  ASSERT_NE(listen, std::string::npos) << config;
  config.insert(listen, "  web_config: " + web + "\n");
  std::ofstream(daemon.config_path(), std::ios::trunc) << config;
  ::kill(daemon.process().pid(), SIGHUP);
  ASSERT_TRUE(daemon.process().wait_for_output("configuration reloaded")) << daemon.output();

  const std::string https = "https://127.0.0.1:" + port;
  auto scrape = curl({"--cacert", pki.ca_crt, "-u", "prometheus:s3cret", https + "/metrics"});
  EXPECT_EQ(scrape.first, 200) << scrape.second;
  EXPECT_NE(scrape.second.find("gpu_devwatch_containers_watched"), std::string::npos) << scrape.second;
  auto anonymous = curl({"--cacert", pki.ca_crt, https + "/metrics"});
  EXPECT_EQ(anonymous.first, 401) << anonymous.second;
  EXPECT_NE(anonymous.second.find("WWW-Authenticate: Basic"), std::string::npos) << anonymous.second;
  EXPECT_EQ(curl({"--cacert", pki.ca_crt, "-u", "prometheus:guess", https + "/metrics"}).first, 401);
  // What kubelet's HTTPS probe does: no certificate check, no credentials.
  auto probe = curl({"--insecure", https + "/healthz"});
  EXPECT_EQ(probe.first, 200) << probe.second;
  EXPECT_EQ(curl({"http://127.0.0.1:" + port + "/metrics"}).first, 0) << "plain HTTP is gone";

  // A web config with a key gpu-devwatch does not implement: refused, TLS kept.
  dir.write("web.yml", "tls_server_config:\n  cert_file: server.crt\n  key_file: server.key\n"
                       "  client_allowed_sans: [prometheus]\n");
  ::kill(daemon.process().pid(), SIGHUP);
  ASSERT_TRUE(daemon.process().wait_for_output("keeping the running configuration")) << daemon.output();
  EXPECT_NE(daemon.output().find("client_allowed_sans"), std::string::npos) << daemon.output();
  scrape = curl({"--cacert", pki.ca_crt, "-u", "prometheus:s3cret", https + "/metrics"});
  EXPECT_EQ(scrape.first, 200) << scrape.second;
  EXPECT_EQ(curl({"--cacert", pki.ca_crt, https + "/metrics"}).first, 401) << "the running users are kept too";
  EXPECT_EQ(daemon.stop(), 0) << daemon.output();

  // The same bad file at start: the daemon does not start, and says which file and key.
  auto run = run_command({GDW_BINARY, "run", "--config", daemon.config_path()}, std::chrono::seconds(30));
  EXPECT_NE(run.exit_code, 0) << run.out << run.err;
  EXPECT_FALSE(run.timed_out) << run.out << run.err;
  EXPECT_NE((run.out + run.err).find(web), std::string::npos) << run.out << run.err;
  EXPECT_NE((run.out + run.err).find("client_allowed_sans"), std::string::npos) << run.out << run.err;
}

}  // namespace
}  // namespace gdw::test
