#include "metrics/event_metrics.h"

#include <prometheus/counter.h>
#include <prometheus/family.h>

#include "metrics/metrics.h"

namespace gdw {

using Id = MetricId;

void EventMetrics::event_sent() { m_->counter(Id::kEventsSent).Increment(); }

void EventMetrics::event_dropped(const std::string& reason) {
  m_->counters(Id::kEventsDropped).Add({{"reason", reason}}).Increment();
}

}  // namespace gdw
