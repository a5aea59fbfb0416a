#include "metrics/health_metrics.h"

#include <prometheus/counter.h>
#include <prometheus/family.h>
#include <prometheus/gauge.h>

#include "metrics/metrics.h"

namespace gdw {

using Id = MetricId;

void HealthMetrics::pod_resources_call(const std::string& result, double latency_seconds) {
  m_->counters(Id::kPodResourcesCalls).Add({{"result", result}}).Increment();
  m_->gauges(Id::kPodResourcesUp).Add({}).Set(result == "ok" ? 1 : 0);
  m_->gauges(Id::kPodResourcesLatency).Add({}).Set(latency_seconds);
}

void HealthMetrics::set_allocation_disagreements(std::size_t n) {
  m_->gauge(Id::kAllocationDisagreements).Set(static_cast<double>(n));
}

void HealthMetrics::set_checkpoint_stale(bool stale, std::size_t unknown_devices) {
  m_->gauge(Id::kCheckpointStale).Set(stale ? 1 : 0);
  m_->gauge(Id::kCheckpointUnknownDevices).Set(static_cast<double>(unknown_devices));
}

void HealthMetrics::checkpoint_remediation(bool success) {
  m_->counters(Id::kRemediations).Add({{"result", success ? "success" : "error"}}).Increment();
}

void HealthMetrics::set_checkpoint_remediation_held(const std::string& reason) {
  for (const char* r : {"inventory-unconfirmed", "awaiting-confirmation", "devices-in-use"})
    m_->gauges(Id::kRemediationHeld).Add({{"reason", r}}).Set(reason == r ? 1 : 0);
}

void HealthMetrics::set_device_plugin(const std::string& socket, bool up, double latency_seconds) {
  m_->gauges(Id::kDevicePluginUp).Add({{"socket", socket}}).Set(up ? 1 : 0);
  m_->gauges(Id::kDevicePluginLatency).Add({{"socket", socket}}).Set(latency_seconds);
}

void HealthMetrics::forget_device_plugin(const std::string& socket) {
  for (Id id : {Id::kDevicePluginUp, Id::kDevicePluginLatency})
    m_->gauges(id).Remove(&m_->gauges(id).Add({{"socket", socket}}));
}

}  // namespace gdw
