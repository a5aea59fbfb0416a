// metrics.web_config (exporter-toolkit's format): the parser, basic auth against real
// bcrypt hashes (made here with libcrypt), and the HTTPS server's request-head parser.
#include <crypt.h>
#include <gtest/gtest.h>

#include <chrono>
#include <string>

#include "metrics/basic_auth.h"
#include "metrics/http_server.h"
#include "metrics/tls_server.h"
#include "metrics/web_config.h"

namespace gdw {
namespace {

std::string bcrypt(const std::string& password, unsigned long cost = 4) {
  char setting[CRYPT_GENSALT_OUTPUT_SIZE];
  EXPECT_NE(crypt_gensalt_rn("$2y$", cost, nullptr, 0, setting, sizeof setting), nullptr);
  crypt_data data{};
  const char* hash = crypt_rn(password.c_str(), setting, &data, sizeof data);
  EXPECT_NE(hash, nullptr);
  return hash ? hash : "";
}

std::string basic(const std::string& user_colon_password) {
  static const char* kAlphabet = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
  std::string out;
  const std::string& in = user_colon_password;
  for (std::size_t i = 0; i < in.size(); i += 3) {
    std::uint32_t v = static_cast<std::uint8_t>(in[i]) << 16;
    if (i + 1 < in.size()) v |= static_cast<std::uint8_t>(in[i + 1]) << 8;
    if (i + 2 < in.size()) v |= static_cast<std::uint8_t>(in[i + 2]);
    out += kAlphabet[(v >> 18) & 63];
    out += kAlphabet[(v >> 12) & 63];
    out += i + 1 < in.size() ? kAlphabet[(v >> 6) & 63] : '=';
    out += i + 2 < in.size() ? kAlphabet[v & 63] : '=';
  }
  return "Basic " + out;
}

constexpr const char* kHash = "$2y$10$2b7ZOAvKkGuVxJbXGYnp0eeS2dDoLImGvCqBPRBahvpDGcOZZsMKe";

TEST(WebConfigParse, EmptyDocumentIsPlainHttpWithoutAuth) {
  auto c = parse_web_config("", "web.yml");
  ASSERT_TRUE(c.ok()) << c.error().message;
  EXPECT_FALSE(c->tls);
  EXPECT_TRUE(c->basic_auth_users.empty());
}

TEST(WebConfigParse, ReadsTlsAndUsers) {
  auto c = parse_web_config(std::string("tls_server_config:\n"
                                        "  cert_file: /tls/tls.crt\n"
                                        "  key_file: /tls/tls.key\n"
                                        "  client_ca_file: /tls/ca.crt\n"
                                        "  client_auth_type: RequireAndVerifyClientCert\n"
                                        "  min_version: TLS13\n"
                                        "basic_auth_users:\n"
                                        "  prometheus: ") + kHash + "\n",
                            "web.yml");
  ASSERT_TRUE(c.ok()) << c.error().message;
  ASSERT_TRUE(c->tls);
  EXPECT_EQ(c->tls->cert_file, "/tls/tls.crt");
  EXPECT_EQ(c->tls->key_file, "/tls/tls.key");
  EXPECT_EQ(c->tls->client_ca_file, "/tls/ca.crt");
  EXPECT_EQ(c->tls->client_auth, ClientAuth::kRequireAndVerify);
  EXPECT_EQ(c->tls->min_version, TlsMinVersion::kTls13);
  EXPECT_EQ(c->basic_auth_users.at("prometheus"), kHash);
}

TEST(WebConfigParse, DefaultsAreNoClientCertAndTls12) {
  auto c = parse_web_config("tls_server_config: {cert_file: a.crt, key_file: a.key}\n", "web.yml");
  ASSERT_TRUE(c.ok()) << c.error().message;
  EXPECT_EQ(c->tls->client_auth, ClientAuth::kNone);
  EXPECT_EQ(c->tls->min_version, TlsMinVersion::kTls12);
}

// Each broken file is refused with the file and the key in the message.
TEST(WebConfigParse, RejectsWhatItDoesNotImplementNamingFileAndKey) {
  const std::pair<const char*, const char*> cases[] = {
      {"http_server_config: {http2: false}\n", "http_server_config"},
      {"tls_server_config: {cert_file: a, key_file: b, client_allowed_sans: [x]}\n", "client_allowed_sans"},
      {"tls_server_config: {cert_file: a, key_file: b, cipher_suites: [x]}\n", "cipher_suites"},
      {"tls_server_config: {cert_file: a, key_file: b, client_auth_type: RequireAnyClientCert, client_ca_file: c}\n",
       "RequireAnyClientCert"},
      {"tls_server_config: {cert_file: a, key_file: b, min_version: TLS10}\n", "min_version"},
      {"tls_server_config: {key_file: b}\n", "cert_file"},
      {"tls_server_config: {cert_file: a}\n", "key_file"},
      {"tls_server_config: {cert_file: a, key_file: b, client_auth_type: RequireAndVerifyClientCert}\n",
       "client_ca_file"},
      {"tls_server_config: {cert_file: a, key_file: b, client_ca_file: c}\n", "client_auth_type"},
      {"basic_auth_users: {prometheus: plaintext}\n", "prometheus"},
      {"basic_auth_users: {prometheus: \"$1$abc$abcdefgh\"}\n", "prometheus"},
      {"basic_auth_users: [prometheus]\n", "basic_auth_users"},
      {"tls_server_config: [a]\n", "tls_server_config"},
      {"tls_server_config: {cert_file: a, cert_file: a, key_file: b}\n", "duplicate"},
      {"- a\n", "must be a map"},
      {"tls_server_config: {cert_file: [\n", "invalid YAML"},
  };
  for (const auto& [text, key] : cases) {
    auto c = parse_web_config(text, "/etc/web.yml");
    ASSERT_FALSE(c.ok()) << text;
    EXPECT_NE(c.error().message.find("/etc/web.yml"), std::string::npos) << c.error().message;
    EXPECT_NE(c.error().message.find(key), std::string::npos) << c.error().message;
  }
}

TEST(WebConfigRead, RelativeFilesAreRelativeToTheConfigsDirectory) {
  char dir[] = "/tmp/gdw-webcfg-XXXXXX";
  ASSERT_NE(::mkdtemp(dir), nullptr);
  const std::string path = std::string(dir) + "/web.yml";
  FILE* f = std::fopen(path.c_str(), "w");
  ASSERT_NE(f, nullptr);
  std::fputs("tls_server_config: {cert_file: tls.crt, key_file: /abs/tls.key}\n", f);
  std::fclose(f);
  auto c = read_web_config(path);
  std::remove(path.c_str());
  ::rmdir(dir);
  ASSERT_TRUE(c.ok()) << c.error().message;
  EXPECT_EQ(c->tls->cert_file, std::string(dir) + "/tls.crt");
  EXPECT_EQ(c->tls->key_file, "/abs/tls.key");
  EXPECT_FALSE(read_web_config(path).ok()) << "a missing file is an error";
}

TEST(BasicAuth, AcceptsOnlyTheRightUserAndPassword) {
  BasicAuth auth({{"prometheus", bcrypt("s3cret")}, {"other", bcrypt("different")}});
  EXPECT_TRUE(auth.allows(basic("prometheus:s3cret")));
  EXPECT_TRUE(auth.allows(basic("prometheus:s3cret"))) << "again, from the cache";
  EXPECT_TRUE(auth.allows("basic " + basic("prometheus:s3cret").substr(6))) << "scheme is case-insensitive";
  EXPECT_FALSE(auth.allows(basic("prometheus:wrong")));
  EXPECT_FALSE(auth.allows(basic("prometheus:s3cret2")));
  EXPECT_FALSE(auth.allows(basic("other:s3cret"))) << "another user's password";
  EXPECT_FALSE(auth.allows(basic("nobody:s3cret")));
  EXPECT_FALSE(auth.allows(basic("prometheus")));
  EXPECT_FALSE(auth.allows(""));
  EXPECT_FALSE(auth.allows("Bearer abc"));
  EXPECT_FALSE(auth.allows("Basic !!!!"));
}

TEST(BasicAuth, PasswordsMayContainColonsAndTheCacheDoesNotConfuseUsers) {
  BasicAuth auth({{"a", bcrypt("x:y")}, {"b", bcrypt("z")}});
  EXPECT_TRUE(auth.allows(basic("a:x:y")));
  EXPECT_FALSE(auth.allows(basic("b:x:y"))) << "a cached success is for its user only";
  EXPECT_TRUE(auth.allows(basic("b:z")));
}

TEST(BasicAuth, AVerifiedPasswordIsNotHashedAgain) {
  BasicAuth auth({{"prometheus", bcrypt("s3cret", 12)}});  // ~200+ ms a verification
  auto timed = [&] {
    const auto start = std::chrono::steady_clock::now();
    EXPECT_TRUE(auth.allows(basic("prometheus:s3cret")));
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  };
  const double first = timed();
  const double second = timed();
  EXPECT_GT(first, 0.05);
  EXPECT_LT(second, first / 10) << "first " << first << " s, second " << second << " s";
}

TEST(Base64, DecodesAndRejects) {
  std::string out;
  EXPECT_TRUE(decode_base64("YTpi", out));
  EXPECT_EQ(out, "a:b");
  EXPECT_TRUE(decode_base64("YQ==", out));
  EXPECT_EQ(out, "a");
  EXPECT_FALSE(decode_base64("YQ=", out));
  EXPECT_FALSE(decode_base64("Y=Q=", out));
  EXPECT_FALSE(decode_base64("YT*i", out));
}

TEST(HttpRequestHead, ParsesMethodPathAndAuthorization) {
  auto r = parse_request_head("GET /metrics?x=1 HTTP/1.1\r\nHost: a\r\nauthorization:  Basic YTpi \r\n\r\n");
  ASSERT_TRUE(r);
  EXPECT_EQ(r->method, "GET");
  EXPECT_EQ(r->path, "/metrics");
  EXPECT_EQ(r->authorization, "Basic YTpi");
  EXPECT_FALSE(parse_request_head("GET /metrics\r\n\r\n"));
  EXPECT_FALSE(parse_request_head("GET metrics HTTP/1.1\r\n\r\n"));
  EXPECT_FALSE(parse_request_head("GET /metrics HTTP/2\r\n\r\n"));
  EXPECT_FALSE(parse_request_head("GET /metrics HTTP/1.1\r\nno colon\r\n\r\n"));
}

TEST(HttpAnswer, CredentialsAreCheckedBeforeRoutingExceptForOpenPaths) {
  HttpRoutes routes{{"/metrics", [] { return HttpResponse{200, "text/plain", "m\n"}; }},
                    {"/healthz", [] { return HttpResponse{200, "text/plain", "ok\n"}; }}};
  HttpServerOptions options;
  options.basic_auth = std::make_shared<const BasicAuth>(std::map<std::string, std::string>{{"p", bcrypt("pw")}});
  options.unauthenticated_paths = {"/healthz"};
  const auto denied = answer_request(routes, options, "GET", "/metrics", "");
  EXPECT_EQ(denied.status, 401);
  ASSERT_EQ(denied.headers.size(), 1u);
  EXPECT_EQ(denied.headers[0].first, "WWW-Authenticate");
  EXPECT_EQ(denied.headers[0].second.rfind("Basic ", 0), 0u);
  EXPECT_EQ(answer_request(routes, options, "GET", "/nope", "").status, 401) << "unknown paths are not told apart";
  EXPECT_EQ(answer_request(routes, options, "GET", "/healthz", "").status, 200);
  EXPECT_EQ(answer_request(routes, options, "GET", "/metrics", basic("p:pw")).status, 200);
  EXPECT_EQ(answer_request(routes, options, "GET", "/nope", basic("p:pw")).status, 404);
  EXPECT_EQ(answer_request(routes, options, "POST", "/metrics", basic("p:pw")).status, 405);
}

}  // namespace
}  // namespace gdw
