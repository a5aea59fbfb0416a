// The daemon's CDI reports: spec files that do not parse (a warning naming the file, once
// while the problem lasts) and CDI names of running GPU containers that no spec defines.
#include "log/log.h"
#include "service/daemon.h"

namespace gdw {

void Daemon::report_cdi(std::size_t unresolved_names) {
  const std::vector<std::string>& errors = node_->cdi_errors();
  std::set<std::string> now(errors.begin(), errors.end());
  for (const auto& e : now) {
    if (!cdi_errors_logged_.count(e)) log::warn("CDI spec not used: " + e);
  }
  cdi_errors_logged_ = std::move(now);
  metrics_.set_cdi_spec_errors(errors.size());
  metrics_.set_cdi_unresolved_devices(unresolved_names);
}

}  // namespace gdw
