// Every Prometheus metric gpu-devwatch exports, by name, in one place: the table of
// families in metrics.cpp (name, type, help, label names). Per-container series carry
// namespace/pod/container labels (a node has at most a few hundred pods) and are removed
// when the container goes away; every other label takes values from a bounded set.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <span>
#include <string>
#include <string_view>
#include <tuple>
#include <unordered_map>
#include <vector>

#include "core/result.h"
#include "metrics/http_server.h"
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

enum class MetricType { kCounter, kGauge, kHistogram };
enum class MetricId : std::uint8_t;  // one per family; enumerated beside the table

// One metric family, as data. Adding a metric: an Id, a row, and the method that sets it.
struct MetricFamilySpec {
  enum class Series {
    kOnUse,    // no series until a method makes one
    kAtStart,  // made at registration: the one unlabeled series, or one per `values`
  };
  MetricId id;
  MetricType type;
  std::string_view name;
  std::string_view help;
  std::vector<std::string_view> labels{};  // the label names of every series
  Series series = Series::kOnUse;
  std::vector<std::string_view> values{};  // kAtStart with one label: its bounded values
  const std::vector<double>* buckets = nullptr;  // histograms
};

// The table, in registration (and so exposition) order.
std::span<const MetricFamilySpec> metric_families();

struct ContainerLabels {
  std::string pod_namespace;
  std::string pod;
  std::string container;
  auto operator<=>(const ContainerLabels&) const = default;
};

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

  // Repairs
  void drift(const ContainerLabels& c, const std::string& device);
  void regrant(bool success, const std::string& method, std::size_t count = 1);  // method: cgroupfs | bpf | systemd
  void repair_duration(double seconds);
  void throttled(const ContainerLabels& c);
  void set_containers_watched(std::size_t n);
  void set_containers_missing_devices(std::size_t n);
  void set_containers_unidentified(std::size_t n);
  void set_containers_throttled(std::size_t n);
  // cgroup v2: device programs attached to watched containers, by owner (ours | systemd |
  // runtime), and programs our repairs replaced.
  void set_device_programs(const std::string& owner, std::size_t n);
  void programs_replaced(std::size_t n);
  // Set when a container is (re)resolved (node/exposure.h, core/env_visible.h):
  // `exposed_devices`: a GPU container's wanted devices the next re-apply would revoke
  // (nullopt: not a GPU container, no series); `env_visible`: it reaches GPUs through
  // NVIDIA_VISIBLE_DEVICES without an allocation. The node totals follow.
  void set_container_exposure(const ContainerLabels& c, std::optional<std::size_t> exposed_devices, bool env_visible);
  // Forgets every series of a container that is gone.
  void forget(const ContainerLabels& c);

  // Inputs
  void set_checkpoint_checksum_valid(bool valid);
  void set_checkpoint_loaded(bool ok);

  // The daemon itself
  void event_loop_error(const std::string& source);
  void resync(const std::string& reason, double seconds);
  void inotify_overflow();
  void config_reload(bool success);

  // Node health: PodResources, the checkpoint, device plugins
  void pod_resources_call(const std::string& result, double latency_seconds);  // result: ok | <error kind>
  void set_allocation_disagreements(std::size_t n);
  void set_ambiguous_pod_identities(std::size_t n);
  void set_identity_conflicts(std::size_t n);
  // CDI: spec files in cdi.spec_dirs that do not parse (left out), and CDI device names
  // allocated to running GPU containers (AllocResp, DRA claims) that no spec defines.
  void set_cdi_spec_errors(std::size_t n);
  void set_cdi_unresolved_devices(std::size_t n);
  void set_checkpoint_stale(bool stale, std::size_t unknown_devices);
  void checkpoint_remediation(bool success);
  // Why a stale checkpoint is not remediated now (one of the three reasons), or "none".
  void set_checkpoint_remediation_held(const std::string& reason);
  void set_device_plugin(const std::string& socket, bool up, double latency_seconds);
  void forget_device_plugin(const std::string& socket);
  void set_checkpoint_last_write(double unix_seconds);
  void set_newest_container_start(double unix_seconds);

  // eBPF probe
  void set_probe_loaded(bool loaded);
  void set_syscall_hook_attached(bool attached);
  void revocation(const std::string& writer);
  void denied_open(const ContainerLabels& c, const std::string& device, std::uint64_t count = 1);
  void set_ring_buffer_drops(std::uint64_t total);

  // Kubernetes Events (any thread). reason: queue_full | unreachable | rejected |
  // credentials | invalid_object.
  void event_sent();
  void event_dropped(const std::string& reason);

  // Node conditions and the pod readiness gate (loop thread). condition: one of the three
  // node condition types; object: node | pod; result: sent | queue_full | unreachable |
  // rejected | credentials.
  void set_node_condition(const std::string& condition, bool status);
  void status_write(const std::string& object, const std::string& result);
  void set_readiness_gate_pods(std::size_t n);
  void set_pod_watch_up(bool up);
  void pod_watch_lists(std::uint64_t n);
  void pod_watch_skipped(std::uint64_t n);

 private:
  // The series of `family` for container `c`, with one more label `extra_name` =
  // `extra_value` when a name is given.
  prometheus::Counter& container_counter(prometheus::Family<prometheus::Counter>& family, const ContainerLabels& c,
                                         std::string_view extra_name = {}, std::string_view extra_value = {});

  std::shared_ptr<prometheus::Registry> registry_;
  std::unique_ptr<HttpServer> http_;
  std::string listen_;
  HttpHandler healthz_;
  MetricsAccess access_;
  Status start_http(const MetricsAccess& access);

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
  std::vector<Registered> families_;
  void register_family(const MetricFamilySpec& spec);
  const Registered& family(MetricId id) const;
  prometheus::Family<prometheus::Counter>& counters(MetricId id) const;
  prometheus::Family<prometheus::Gauge>& gauges(MetricId id) const;
  prometheus::Counter& counter(MetricId id) const;  // the unlabeled series
  prometheus::Gauge& gauge(MetricId id) const;
  prometheus::Histogram& histogram(MetricId id) const;

  double checkpoint_last_write_seconds_ = 0;
  double newest_container_start_seconds_ = 0;
  void update_checkpoint_lag();
  std::uint64_t ring_buffer_drops_seen_ = 0;
  // regrants_total's series by (result, method) and revocations_total's by writer (both
  // bounded sets): found without building and hashing label maps per repair.
  std::map<std::pair<bool, std::string>, prometheus::Counter*> regrant_series_;
  std::map<std::string, prometheus::Counter*, std::less<>> revocation_series_;

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
  std::map<ContainerLabels, std::size_t> exposed_;  // GPU containers' exposed device counts
  std::set<ContainerLabels> env_visible_;
  void update_exposure_totals();
};

}  // namespace gdw
