// Who may read /metrics: metrics.web_config, loaded into what the HTTP server enforces.
// Loading reads every file the web config names (certificate, key, client CA), so a bad
// one fails here: at start the daemon does not start, on SIGHUP the running one is kept.
#pragma once

#include <memory>
#include <string>

#include "core/result.h"

namespace gdw {

class TlsContext;
class BasicAuth;

struct MetricsAccess {
  std::shared_ptr<const TlsContext> tls;         // null: plain HTTP
  std::shared_ptr<const BasicAuth> basic_auth;   // null: no authentication
};

// `web_config_path` empty: plain HTTP without authentication.
Result<MetricsAccess> load_metrics_access(const std::string& web_config_path);

}  // namespace gdw
