#include "metrics/probe_metrics.h"

#include <prometheus/counter.h>
#include <prometheus/family.h>
#include <prometheus/gauge.h>
#include <prometheus/histogram.h>

#include "metrics/metrics.h"

namespace gdw {

using Id = MetricId;

void ProbeMetrics::set_probe_loaded(bool loaded) { m_->gauge(Id::kProbeLoaded).Set(loaded ? 1 : 0); }

void ProbeMetrics::set_syscall_hook_attached(bool attached) {
  m_->gauge(Id::kSyscallHookAttached).Set(attached ? 1 : 0);
}

void ProbeMetrics::set_attach_hook_attached(std::optional<AttachHookKind> kind) {
  for (AttachHookKind k : {AttachHookKind::kLsm, AttachHookKind::kFexit, AttachHookKind::kKmalloc})
    m_->gauges(Id::kAttachHookAttached).Add({{"kind", std::string(to_string(k))}}).Set(kind == k ? 1 : 0);
}

void ProbeMetrics::set_write_path_hook_attached(bool attached) {
  m_->gauge(Id::kWritePathHookAttached).Set(attached ? 1 : 0);
}

void ProbeMetrics::set_rule_writers_degraded(bool degraded) {
  m_->gauge(Id::kRuleWritersDegraded).Set(degraded ? 1 : 0);
}

void ProbeMetrics::set_capability_hook_attached(bool attached) {
  m_->gauge(Id::kCapabilityHookAttached).Set(attached ? 1 : 0);
}

void ProbeMetrics::revocation(const std::string& writer) {
  auto& series = m_->revocation_series_;
  auto it = series.find(writer);
  if (it == series.end()) it = series.emplace(writer, &m_->counters(Id::kRevocations).Add({{"writer", writer}})).first;
  it->second->Increment();
}

void ProbeMetrics::denied_open(const ContainerLabels& c, const std::string& device, std::uint64_t count) {
  m_->container_counter(m_->counters(Id::kDeniedOpens), c, "device", device).Increment(static_cast<double>(count));
}

void ProbeMetrics::set_ring_buffer_drops(std::uint64_t total) {
  if (total <= m_->ring_buffer_drops_seen_) return;
  m_->counter(Id::kRingBufferDrops).Increment(static_cast<double>(total - m_->ring_buffer_drops_seen_));
  m_->ring_buffer_drops_seen_ = total;
}

void ProbeMetrics::record_delay(double seconds) { m_->histogram(Id::kProbeRecordDelay).Observe(seconds); }

}  // namespace gdw
