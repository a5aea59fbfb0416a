#include "metrics/repair_metrics.h"

#include <prometheus/counter.h>
#include <prometheus/family.h>
#include <prometheus/histogram.h>

#include "metrics/metrics.h"

namespace gdw {

using Id = MetricId;

void RepairMetrics::drift(const ContainerLabels& c, const std::string& device) {
  m_->container_counter(m_->counters(Id::kDrift), c, "device", device).Increment();
}

void RepairMetrics::regrant(bool success, const std::string& method, std::size_t count) {
  prometheus::Counter*& series = m_->regrant_series_[{success, method}];
  if (!series) series = &m_->counters(Id::kRegrants).Add({{"result", success ? "success" : "error"}, {"method", method}});
  series->Increment(static_cast<double>(count));
}

void RepairMetrics::repair_duration(double seconds) { m_->histogram(Id::kRepairDuration).Observe(seconds); }

void RepairMetrics::throttled(const ContainerLabels& c) {
  m_->container_counter(m_->counters(Id::kRepairsThrottled), c).Increment();
}

void RepairMetrics::programs_replaced(std::size_t n) {
  m_->counter(Id::kDeviceProgramsReplaced).Increment(static_cast<double>(n));
}

void RepairMetrics::programs_loaded(std::size_t n, bool ahead) {
  // Family::Add hands back the series made at registration for these labels.
  m_->counters(Id::kDeviceProgramsLoaded).Add({{"when", ahead ? "ahead" : "repair"}}).Increment(static_cast<double>(n));
}

void RepairMetrics::look_ahead(LookAhead outcome) {
  static constexpr const char* kOutcome[] = {"looked", "same_cpu", "interval"};  // by LookAhead
  m_->counters(Id::kLooksAhead).Add({{"outcome", kOutcome[static_cast<int>(outcome)]}}).Increment();
}

void RepairMetrics::stale_swaps(std::size_t n) {
  m_->counter(Id::kDeviceProgramStaleSwaps).Increment(static_cast<double>(n));
}

void RepairMetrics::set_swap_revisions(bool checked) {
  m_->gauges(Id::kDeviceProgramSwapRevisions).Add({}).Set(checked ? 1 : 0);
}

}  // namespace gdw

namespace gdw {

void RepairMetrics::apply_wait(std::string_view until) {
  m_->counters(MetricId::kApplyWaits).Add({{"until", std::string(until)}}).Increment();
}

}  // namespace gdw
