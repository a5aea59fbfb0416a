// Where the API server is and how the daemon proves who it is: kubernetes.* keys, else the
// in-cluster convention (KUBERNETES_SERVICE_HOST/_PORT, the ServiceAccount's token and CA).
#pragma once

#include <sys/types.h>

#include <chrono>
#include <optional>
#include <string>

#include "core/result.h"

namespace gdw::kube {

struct ApiEndpoint {
  std::string server;  // https://host:port
  std::string token_file;
  std::string ca_file;
};

// `configured` (kubernetes.api_server) when set; else https://<host>:<port> from the
// in-cluster environment (an IPv6 host is bracketed); nullopt when neither is known.
std::optional<std::string> api_server_url(const std::string& configured, const char* service_host,
                                          const char* service_port);

// The ServiceAccount token, re-read when the file changes (kubelet rotates projected tokens
// by swapping a symlink: a new inode) and at least every `max_age`. The token is never
// logged; errors name the file only.
class TokenFile {
 public:
  explicit TokenFile(std::string path, std::chrono::seconds max_age = std::chrono::seconds(60))
      : path_(std::move(path)), max_age_(max_age) {}
  Result<std::string> get();

 private:
  std::string path_;
  std::chrono::seconds max_age_;
  std::string token_;
  ino_t ino_ = 0;
  dev_t dev_ = 0;
  struct timespec mtime_{};
  off_t size_ = -1;
  std::chrono::steady_clock::time_point read_at_{};
};

// This node's name: NODE_NAME (the DaemonSet passes spec.nodeName through the downward
// API), else the host name.
std::string node_name();

// What the daemon's requests name themselves with: "gpu-devwatch/<version> (<node>)", as
// kubelet's "kubelet/v1.31.0 (linux/amd64) kubernetes/..." does, so that the API server's
// audit log and API Priority and Fairness can tell its requests apart. Characters a header
// cannot carry are replaced.
std::string user_agent(const std::string& node);

// Token file content to the header value's token: surrounding whitespace dropped; empty or
// containing characters an HTTP header cannot carry: an error.
Result<std::string> parse_token(const std::string& content);

}  // namespace gdw::kube
