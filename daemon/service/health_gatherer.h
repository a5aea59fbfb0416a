// The two node health questions the daemon asks periodically and `check` asks once: what
// does kubelet's PodResources API list, and which device plugins answer. Both are asked
// without blocking: a client's descriptor becomes readable with its answer, and take_*()
// reads and interprets it, the one way for both. The daemon reads them from its loop
// (service/node_health_monitor.h); `check` waits for both with gather_once().
#pragma once

#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "core/config.h"
#include "core/result.h"
#include "kubeletapi/device_plugins.h"
#include "kubeletapi/pod_resources.h"

namespace gdw {

// One PodResources List outcome.
struct PodResourcesReading {
  bool ok = false;
  std::string state;    // "ok" or the error's kind (the metric's label)
  std::string message;  // the error, or how many containers were listed
  double latency_seconds = 0;
  std::vector<PodResourcesContainer> containers;  // when ok
};

class HealthGatherer {
 public:
  // `pod_resources_interval`: how soon PodResources may be asked again (0 for once).
  static Result<std::unique_ptr<HealthGatherer>> create(const Config& config, Duration pod_resources_interval);

  // PodResources is asked unless kubelet.source is checkpoint.
  bool asks_pod_resources() const { return pod_resources_ != nullptr; }
  int pod_resources_fd() const { return pod_resources_ ? pod_resources_->fd() : -1; }
  int plugins_fd() const { return plugins_->fd(); }
  // Starts a List / a probe of every plugin socket unless one is under way. An error: it
  // could not start (no socket): there is no answer to wait for.
  Status ask_pod_resources();
  Status ask_plugins();
  std::optional<PodResourcesReading> take_pod_resources();
  std::optional<std::vector<DevicePluginProbe>> take_plugins();

  // Both asked and waited for, each at most its own timeout (one-shot commands only).
  struct Once {
    std::optional<PodResourcesReading> pod_resources;  // nothing when not asked
    std::string pod_resources_error;                   // why there is no reading
    std::vector<DevicePluginProbe> plugins;
    std::string plugins_error;
  };
  Once gather_once(const Config& config);

 private:
  std::unique_ptr<PodResourcesClient> pod_resources_;
  std::unique_ptr<DevicePluginProber> plugins_;
};

}  // namespace gdw
