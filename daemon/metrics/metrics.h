// Every Prometheus metric gpu-devwatch exports, by name, in one place (metrics.cpp).
// Per-container series carry namespace/pod/container labels (a node has at most a few
// hundred pods) and are removed when the container goes away.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <tuple>
#include <vector>

#include "core/result.h"

namespace prometheus {
class Registry;
class Exposer;
class Counter;
class Gauge;
class Histogram;
template <typename T>
class Family;
}  // namespace prometheus

namespace gdw {

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

  // Serves /metrics at host:port (":port" = all addresses). Starts the HTTP server's threads.
  Status serve(const std::string& listen);
  // The text exposition, as served.
  std::string render() const;

  // Repairs
  void drift(const ContainerLabels& c, const std::string& device);
  void regrant(bool success, const std::string& method);  // method: cgroupfs | bpf | systemd
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
  void set_checkpoint_stale(bool stale, std::size_t unknown_devices);
  void checkpoint_remediation(bool success);
  void set_device_plugin(const std::string& socket, bool up, double latency_seconds);
  void forget_device_plugin(const std::string& socket);
  void set_checkpoint_last_write(double unix_seconds);
  void set_newest_container_start(double unix_seconds);

  // eBPF probe
  void set_probe_loaded(bool loaded);
  void set_syscall_hook_attached(bool attached);
  void revocation(const std::string& writer);
  void denied_open(const ContainerLabels& c, const std::string& device);
  void set_ring_buffer_drops(std::uint64_t total);

 private:
  prometheus::Counter& container_counter(prometheus::Family<prometheus::Counter>& family, const ContainerLabels& c,
                                         std::map<std::string, std::string> extra = {});

  std::shared_ptr<prometheus::Registry> registry_;
  std::unique_ptr<prometheus::Exposer> exposer_;

  prometheus::Family<prometheus::Counter>* drift_;
  prometheus::Family<prometheus::Counter>* regrants_;
  prometheus::Family<prometheus::Histogram>* repair_duration_;
  prometheus::Histogram* repair_duration_all_;
  prometheus::Family<prometheus::Counter>* throttled_;
  prometheus::Gauge* watched_;
  prometheus::Gauge* missing_;
  prometheus::Gauge* unidentified_;
  prometheus::Gauge* fighting_;
  prometheus::Gauge* checksum_valid_;
  prometheus::Gauge* checkpoint_loaded_;
  prometheus::Family<prometheus::Counter>* loop_errors_;
  prometheus::Family<prometheus::Counter>* resyncs_;
  prometheus::Histogram* resync_duration_;
  prometheus::Counter* inotify_overflows_;
  prometheus::Family<prometheus::Counter>* config_reloads_;
  prometheus::Gauge* probe_loaded_;
  prometheus::Gauge* syscall_hook_attached_;
  prometheus::Family<prometheus::Counter>* pod_resources_calls_;
  // Created at the first call: a node that never asks PodResources exports neither.
  prometheus::Family<prometheus::Gauge>* pod_resources_up_;
  prometheus::Family<prometheus::Gauge>* pod_resources_latency_;
  prometheus::Gauge* disagreements_;
  prometheus::Gauge* checkpoint_stale_;
  prometheus::Family<prometheus::Gauge>* device_programs_;
  prometheus::Counter* programs_replaced_;
  prometheus::Gauge* checkpoint_unknown_devices_;
  prometheus::Family<prometheus::Counter>* remediations_;
  prometheus::Family<prometheus::Gauge>* plugin_up_;
  prometheus::Family<prometheus::Gauge>* plugin_latency_;
  prometheus::Gauge* checkpoint_last_write_;
  prometheus::Gauge* newest_container_start_;
  prometheus::Gauge* checkpoint_lag_;
  double checkpoint_last_write_seconds_ = 0;
  double newest_container_start_seconds_ = 0;
  void update_checkpoint_lag();
  prometheus::Family<prometheus::Counter>* revocations_;
  prometheus::Family<prometheus::Counter>* denied_opens_;
  prometheus::Counter* ring_buffer_drops_;
  std::uint64_t ring_buffer_drops_seen_ = 0;

  // Which per-container series exist, to remove them with the container.
  struct Series {
    prometheus::Family<prometheus::Counter>* family;
    prometheus::Counter* counter;
  };
  std::map<ContainerLabels, std::vector<Series>> by_container_;
};

}  // namespace gdw
