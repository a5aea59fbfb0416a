// Node conditions' and the pod readiness gate's metrics (loop thread): the conditions as
// last judged, status writes by object and result, and the pod watch that finds the gated
// pods. condition: one of the three node condition types; object: node | pod; result:
// sent | queue_full | unreachable | rejected | credentials.
// A view on the one Metrics registry (metrics.h): cheap to copy, valid while it lives.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

namespace gdw {

class Metrics;

class StatusMetrics {
 public:
  explicit StatusMetrics(Metrics& metrics) : m_(&metrics) {}

  void set_node_condition(const std::string& condition, bool status);
  void status_write(const std::string& object, const std::string& result);
  void set_readiness_gate_pods(std::size_t n);
  void set_pod_watch_up(bool up);
  void pod_watch_lists(std::uint64_t n);
  void pod_watch_skipped(std::uint64_t n);

 private:
  Metrics* m_;
};

}  // namespace gdw
