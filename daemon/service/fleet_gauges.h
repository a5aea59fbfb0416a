// The container fleet's gauges, set from what count_gauges() counted (service/gauges.h):
// GPU containers watched, missing devices, unidentified, held back; identity problems and
// CDI errors, each logged once while it lasts; device programs by owner (cgroup v2).
#pragma once

#include <set>
#include <string>

#include "core/log_once.h"
#include "metrics/node_metrics.h"
#include "node/node_model.h"
#include "service/gauges.h"

namespace gdw {

class FleetGauges {
 public:
  explicit FleetGauges(NodeMetrics metrics) : metrics_(metrics) {}

  // `policy_in_programs`: the node's device policy is in device programs (cgroup v2).
  void report(const GaugeCounts& counts, const NodeModel& node, bool policy_in_programs);

 private:
  void report_cdi(const NodeModel& node, std::size_t unresolved_names);

  NodeMetrics metrics_;
  LogOncePer<std::string> identity_problems_;  // ambiguous names, bundle conflicts
  std::set<std::string> cdi_errors_logged_;
};

}  // namespace gdw
