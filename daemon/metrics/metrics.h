// The one Prometheus registry of gpu-devwatch: every family of the catalogue
// (metric_catalogue.h) registered at construction, served on /metrics with /healthz.
// Parts of the daemon set their metrics through typed views (repair_metrics.h,
// probe_metrics.h, health_metrics.h, node_metrics.h, daemon_metrics.h, event_metrics.h),
// which are the only code that reaches the series kept here.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "core/result.h"
#include "metrics/container_labels.h"
#include "metrics/http_server.h"
#include "metrics/metric_catalogue.h"
#include "metrics/metrics_access.h"

namespace prometheus {
class Registry;
class Counter;
class Gauge;
class Histogram;
template <typename T>
class Family;
}  // namespace prometheus

namespace gdw {

class Metrics {
 public:
  Metrics();
  ~Metrics();

  // Serves /metrics and /healthz (answered by `healthz`, on a server thread) at host:port
  // (":port" = all addresses). Starts the HTTP server's threads.
  // `access` (metrics.web_config): TLS and basic auth; /healthz stays unauthenticated (the
  // kubelet's probe sends no credentials).
  Status serve(const std::string& listen, HttpHandler healthz, MetricsAccess access = {});
  // Serves again with other access settings (same address, same /healthz); if that fails,
  // the previous settings are served again and the error returned.
  Status reserve(MetricsAccess access);
  // The text exposition, as served.
  std::string render() const;

 private:
  friend class RepairMetrics;
  friend class ProbeMetrics;
  friend class HealthMetrics;
  friend class NodeMetrics;
  friend class DaemonMetrics;
  friend class EventMetrics;
  friend class StatusMetrics;

  // A registered family by MetricId: the family of its type and, for an unlabeled one
  // made at start, that series (kept: prometheus-cpp's Add() allocates on every call).
  struct Registered {
    prometheus::Family<prometheus::Counter>* counters = nullptr;
    prometheus::Family<prometheus::Gauge>* gauges = nullptr;
    prometheus::Family<prometheus::Histogram>* histograms = nullptr;
    prometheus::Counter* counter = nullptr;
    prometheus::Gauge* gauge = nullptr;
    prometheus::Histogram* histogram = nullptr;
  };
  void register_family(const MetricFamilySpec& spec);
  const Registered& family(MetricId id) const;
  prometheus::Family<prometheus::Counter>& counters(MetricId id) const;
  prometheus::Family<prometheus::Gauge>& gauges(MetricId id) const;
  prometheus::Counter& counter(MetricId id) const;  // the unlabeled series
  prometheus::Gauge& gauge(MetricId id) const;
  prometheus::Histogram& histogram(MetricId id) const;
  // The series of `family` for container `c`, with one more label `extra_name` =
  // `extra_value` when a name is given; remembered so that forget_container() removes it.
  prometheus::Counter& container_counter(prometheus::Family<prometheus::Counter>& family, const ContainerLabels& c,
                                         std::string_view extra_name = {}, std::string_view extra_value = {});
  void forget_container(const ContainerLabels& c);
  static std::map<std::string, std::string> labels_of(const ContainerLabels& c);
  Status start_http(const MetricsAccess& access);

  std::shared_ptr<prometheus::Registry> registry_;
  std::unique_ptr<HttpServer> http_;
  std::string listen_;
  HttpHandler healthz_;
  MetricsAccess access_;
  std::vector<Registered> families_;

  // What the views keep between calls.
  double checkpoint_last_write_seconds_ = 0;
  double newest_container_start_seconds_ = 0;
  std::uint64_t ring_buffer_drops_seen_ = 0;
  // regrants_total's series by (result, method) and revocations_total's by writer (both
  // bounded sets): found without building and hashing label maps per repair.
  std::map<std::pair<bool, std::string>, prometheus::Counter*> regrant_series_;
  std::map<std::string, prometheus::Counter*, std::less<>> revocation_series_;
  std::map<ContainerLabels, std::size_t> exposed_;  // GPU containers' exposed device counts
  std::set<ContainerLabels> env_visible_;

  // Which per-container series exist, to remove them with the container, and to find a
  // series again without hashing its labels (a storm counts drift per device each repair).
  struct Series {
    prometheus::Family<prometheus::Counter>* family;
    prometheus::Counter* counter;
    std::string extra_name, extra_value;  // the label beyond the container's, if any
  };
  struct LabelsHash {
    std::size_t operator()(const ContainerLabels& c) const;
  };
  std::unordered_map<ContainerLabels, std::vector<Series>, LabelsHash> by_container_;
  // The entry found last (a node: rehashing keeps it where it is): a repair counts drift
  // for each device of one container in a row, and comparing three short labels costs
  // less than hashing them again.
  std::pair<const ContainerLabels, std::vector<Series>>* last_container_ = nullptr;
};

}  // namespace gdw
