// The node health checks' metrics: PodResources calls, checkpoint staleness and its
// remediation, device plugins answering.
// A view on the one Metrics registry (metrics.h): cheap to copy, valid while it lives.
#pragma once

#include <cstddef>
#include <string>

namespace gdw {

class Metrics;

class HealthMetrics {
 public:
  explicit HealthMetrics(Metrics& metrics) : m_(&metrics) {}

  void pod_resources_call(const std::string& result, double latency_seconds);  // result: ok | <error kind>
  void set_allocation_disagreements(std::size_t n);
  void set_checkpoint_stale(bool stale, std::size_t unknown_devices);
  void checkpoint_remediation(bool success);
  // Why a stale checkpoint is not remediated now (one of the three reasons), or "none".
  void set_checkpoint_remediation_held(const std::string& reason);
  void set_device_plugin(const std::string& socket, bool up, double latency_seconds);
  void forget_device_plugin(const std::string& socket);

 private:
  Metrics* m_;
};

}  // namespace gdw
