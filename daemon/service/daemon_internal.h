// Pieces the daemon's source files share (daemon.cpp, daemon_probe.cpp). Not an API.
#pragma once

#include <string>
#include <vector>

#include "core/desired_state.h"
#include "log/log.h"
#include "core/repair_policy.h"
#include "metrics/metrics.h"

namespace gdw::daemon_internal {

// A revocation the probe saw at most this long before a repair's trigger caused it.
inline constexpr std::chrono::seconds kAttributionWindow{1};

// Whether a revocation seen at `at` can be what a repair triggered at `trigger` answered:
// it came first (the probe's kernel timestamp and the trigger's are both CLOCK_MONOTONIC),
// and not long before.
inline bool explains(Clock::time_point at, Clock::time_point trigger) {
  return at <= trigger && trigger - at <= kAttributionWindow;
}

inline std::string device_names(const std::vector<WantedDevice>& devices) {
  std::string s;
  for (const auto& d : devices) s += (s.empty() ? "" : ",") + d.name;
  return s;
}

inline std::string grant_rules_text(const std::vector<WantedDevice>& devices) {
  std::string s;
  for (const auto& r : grant_rules(devices)) s += (s.empty() ? "" : "; ") + format_device_rule(r);
  return s;
}

// "N more repairs in the last X s not logged ...": what a rate-limited repair log line adds
// (daemon_repair_log.cpp).
std::string unlogged_repairs_text(std::uint64_t repairs, Clock::duration over);

inline log::Fields fields_of(const ContainerLabels& l, const std::string& cgroup) {
  log::Fields f;
  f.pod_namespace = l.pod_namespace;
  f.pod = l.pod;
  f.container = l.container;
  f.cgroup = cgroup;
  return f;
}


}  // namespace gdw::daemon_internal
