#include "metrics/metrics_access.h"

#include "metrics/basic_auth.h"
#include "metrics/tls_context.h"
#include "metrics/web_config.h"

namespace gdw {

Result<MetricsAccess> load_metrics_access(const std::string& web_config_path) {
  MetricsAccess access;
  if (web_config_path.empty()) return access;
  auto config = read_web_config(web_config_path);
  if (!config) return with_context("metrics.web_config", config.error());
  if (config->tls) {
    auto tls = TlsContext::load(*config->tls);
    if (!tls) return with_context("metrics.web_config " + web_config_path + ": tls_server_config", tls.error());
    access.tls = std::move(*tls);
  }
  if (!config->basic_auth_users.empty())
    access.basic_auth = std::make_shared<const BasicAuth>(std::move(config->basic_auth_users));
  return access;
}

}  // namespace gdw
