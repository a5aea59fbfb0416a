#include "metrics/daemon_metrics.h"

#include <prometheus/counter.h>
#include <prometheus/family.h>
#include <prometheus/histogram.h>

#include "metrics/metrics.h"

namespace gdw {

using Id = MetricId;

void DaemonMetrics::event_loop_error(const std::string& source) {
  m_->counters(Id::kEventLoopErrors).Add({{"source", source}}).Increment();
}

void DaemonMetrics::resync(const std::string& reason, double seconds) {
  m_->counters(Id::kResyncs).Add({{"reason", reason}}).Increment();
  m_->histogram(Id::kResyncDuration).Observe(seconds);
}

void DaemonMetrics::inotify_overflow() { m_->counter(Id::kInotifyOverflows).Increment(); }

void DaemonMetrics::config_reload(bool success) {
  m_->counters(Id::kConfigReloads).Add({{"result", success ? "success" : "error"}}).Increment();
}

}  // namespace gdw
