#include "metrics/status_metrics.h"

#include <prometheus/counter.h>
#include <prometheus/family.h>
#include <prometheus/gauge.h>

#include "metrics/metrics.h"

namespace gdw {

using Id = MetricId;

void StatusMetrics::set_node_condition(const std::string& condition, bool status) {
  m_->gauges(Id::kNodeCondition).Add({{"condition", condition}}).Set(status ? 1 : 0);
}

void StatusMetrics::status_write(const std::string& object, const std::string& result) {
  m_->counters(Id::kStatusWrites).Add({{"object", object}, {"result", result}}).Increment();
}

void StatusMetrics::set_readiness_gate_pods(std::size_t n) {
  m_->gauge(Id::kReadinessGatePods).Set(static_cast<double>(n));
}

void StatusMetrics::set_pod_watch_up(bool up) { m_->gauges(Id::kPodWatchUp).Add({}).Set(up ? 1 : 0); }

void StatusMetrics::pod_watch_lists(std::uint64_t n) {
  m_->counter(Id::kPodWatchLists).Increment(static_cast<double>(n));
}

void StatusMetrics::pod_watch_skipped(std::uint64_t n) {
  m_->counter(Id::kPodWatchSkipped).Increment(static_cast<double>(n));
}

}  // namespace gdw
