// A local HTTPS stand-in for the API server's events endpoints (fake_apiserver.py), with a
// CA, server certificate (127.0.0.1) and ServiceAccount token made for the test.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "support/process.h"
#include "support/temp_dir.h"

namespace gdw::test {

struct RecordedRequest {
  std::string method;
  std::string path;
  std::string authorization;
  std::string content_type;
  nlohmann::json body;  // null when the body is not JSON
};

class FakeApiServer {
 public:
  // hang: accepts and completes TLS, never answers.
  explicit FakeApiServer(bool hang = false);
  ~FakeApiServer();
  bool running() const { return port_ > 0; }
  std::string setup_error() const { return error_; }

  std::string url() const { return "https://127.0.0.1:" + std::to_string(port_); }
  const std::string& ca_file() const { return ca_; }
  const std::string& token_file() const { return token_file_; }
  // Another CA, which did not sign the server's certificate.
  std::string other_ca_file();
  // Replaces the token file as kubelet rotates projected tokens (new file, rename).
  void rotate_token(const std::string& token);
  std::vector<RecordedRequest> requests() const;
  // The daemon's configuration keys for this server.
  std::string config_yaml(const std::string& events_extra = "") const;

 private:
  bool make_pki();

  TempDir dir_{"gdw-apiserver"};
  std::string ca_, token_file_, log_;
  std::string error_;
  int port_ = 0;
  std::unique_ptr<BackgroundProcess> server_;
};

}  // namespace gdw::test
