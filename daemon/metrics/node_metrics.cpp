#include "metrics/node_metrics.h"

#include <prometheus/counter.h>
#include <prometheus/family.h>
#include <prometheus/gauge.h>

#include "metrics/metrics.h"

namespace gdw {
namespace {

using Id = MetricId;

// How much older the newest allocation in the checkpoint is than the newest container.
double checkpoint_lag(double last_write, double newest_start) {
  const double lag = newest_start - last_write;
  return last_write > 0 && lag > 0 ? lag : 0;
}

}  // namespace

void NodeMetrics::set_containers_watched(std::size_t n) { m_->gauge(Id::kContainersWatched).Set(static_cast<double>(n)); }
void NodeMetrics::set_containers_missing_devices(std::size_t n) {
  m_->gauge(Id::kContainersMissingDevices).Set(static_cast<double>(n));
}
void NodeMetrics::set_containers_unidentified(std::size_t n) {
  m_->gauge(Id::kContainersUnidentified).Set(static_cast<double>(n));
}
void NodeMetrics::set_containers_throttled(std::size_t n) {
  m_->gauge(Id::kContainersThrottled).Set(static_cast<double>(n));
}
void NodeMetrics::set_ambiguous_pod_identities(std::size_t n) {
  m_->gauge(Id::kAmbiguousPodIdentities).Set(static_cast<double>(n));
}
void NodeMetrics::set_identity_conflicts(std::size_t n) { m_->gauge(Id::kIdentityConflicts).Set(static_cast<double>(n)); }
void NodeMetrics::set_cdi_spec_errors(std::size_t n) { m_->gauge(Id::kCdiSpecErrors).Set(static_cast<double>(n)); }
void NodeMetrics::set_cdi_unresolved_devices(std::size_t n) {
  m_->gauge(Id::kCdiUnresolvedDevices).Set(static_cast<double>(n));
}

void NodeMetrics::set_device_programs(const std::string& owner, std::size_t n) {
  m_->gauges(Id::kDevicePrograms).Add({{"owner", owner}}).Set(static_cast<double>(n));
}

void NodeMetrics::set_checkpoint_checksum_valid(bool valid) { m_->gauge(Id::kCheckpointChecksumValid).Set(valid ? 1 : 0); }
void NodeMetrics::set_checkpoint_loaded(bool ok) { m_->gauge(Id::kCheckpointLoaded).Set(ok ? 1 : 0); }

void NodeMetrics::set_checkpoint_last_write(double unix_seconds) {
  m_->checkpoint_last_write_seconds_ = unix_seconds;
  m_->gauge(Id::kCheckpointLastWrite).Set(unix_seconds);
  m_->gauge(Id::kCheckpointLag).Set(checkpoint_lag(unix_seconds, m_->newest_container_start_seconds_));
}

void NodeMetrics::set_newest_container_start(double unix_seconds) {
  m_->newest_container_start_seconds_ = unix_seconds;
  m_->gauge(Id::kNewestContainerStart).Set(unix_seconds);
  m_->gauge(Id::kCheckpointLag).Set(checkpoint_lag(m_->checkpoint_last_write_seconds_, unix_seconds));
}

void NodeMetrics::set_container_exposure(const ContainerLabels& c, std::optional<ExposedDevices> exposed,
                                         bool env_visible) {
  auto& family = m_->gauges(Id::kExposedDevices);
  auto series = [&](const char* reapplier) -> prometheus::Gauge& {
    auto labels = Metrics::labels_of(c);
    labels.emplace("reapplier", reapplier);
    return family.Add(labels);
  };
  if (exposed) {
    series("runtime").Set(static_cast<double>(exposed->runtime));
    series("systemd").Set(static_cast<double>(exposed->systemd));
    m_->exposed_[c] = exposed->runtime + exposed->systemd;
  } else if (m_->exposed_.erase(c)) {
    family.Remove(&series("runtime"));
    family.Remove(&series("systemd"));
  }
  if (env_visible) {
    m_->env_visible_.insert(c);
  } else {
    m_->env_visible_.erase(c);
  }
  std::size_t containers = 0;
  for (const auto& [labels, n] : m_->exposed_) containers += n > 0;
  m_->gauge(Id::kContainersExposed).Set(static_cast<double>(containers));
  m_->gauge(Id::kEnvVisibleContainers).Set(static_cast<double>(m_->env_visible_.size()));
}

void NodeMetrics::forget(const ContainerLabels& c) {
  set_container_exposure(c, std::nullopt, false);
  m_->forget_container(c);
}

}  // namespace gdw
