// metrics.web_config: Prometheus exporter-toolkit's web configuration file (YAML), the
// subset gpu-devwatch implements. Keys outside that subset are errors, never ignored: an
// operator who writes `client_allowed_sans` expects it enforced.
//
//   tls_server_config:
//     cert_file: /etc/gpu-devwatch/tls/tls.crt      # PEM, may carry the chain
//     key_file: /etc/gpu-devwatch/tls/tls.key
//     client_auth_type: RequireAndVerifyClientCert  # NoClientCert (default) |
//                                                   # VerifyClientCertIfGiven | RequireAndVerifyClientCert
//     client_ca_file: /etc/gpu-devwatch/tls/ca.crt  # required with a verifying client_auth_type
//     min_version: TLS12                            # TLS12 (default) | TLS13
//   basic_auth_users:
//     prometheus: $2y$10$...                        # bcrypt hash
#pragma once

#include <map>
#include <optional>
#include <string>
#include <string_view>

#include "core/result.h"

namespace gdw {

enum class ClientAuth { kNone, kVerifyIfGiven, kRequireAndVerify };
enum class TlsMinVersion { kTls12, kTls13 };

struct WebConfig {
  struct Tls {
    std::string cert_file;
    std::string key_file;
    std::string client_ca_file;  // empty: none
    ClientAuth client_auth = ClientAuth::kNone;
    TlsMinVersion min_version = TlsMinVersion::kTls12;
    bool operator==(const Tls&) const = default;
  };
  std::optional<Tls> tls;                             // absent: plain HTTP
  std::map<std::string, std::string> basic_auth_users;  // user -> bcrypt hash; empty: no auth
  bool operator==(const WebConfig&) const = default;
};

// Parses the file's text; `file_name` only labels errors ("<file>: <key>: ...").
// An empty document is a valid config: plain HTTP, no authentication.
Result<WebConfig> parse_web_config(std::string_view yaml_text, const std::string& file_name);

// Reads and parses the file at `path`.
Result<WebConfig> read_web_config(const std::string& path);

}  // namespace gdw
