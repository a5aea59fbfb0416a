// Kubernetes Events' metrics (any thread): writes sent and dropped. reason: queue_full |
// unreachable | rejected | credentials | invalid_object.
// A view on the one Metrics registry (metrics.h): cheap to copy, valid while it lives.
#pragma once

#include <string>

namespace gdw {

class Metrics;

class EventMetrics {
 public:
  explicit EventMetrics(Metrics& metrics) : m_(&metrics) {}

  void event_sent();
  void event_dropped(const std::string& reason);

 private:
  Metrics* m_;
};

}  // namespace gdw
