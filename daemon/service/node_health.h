// The node faults that sit beside device drift, watched from the daemon's loop without ever
// blocking it: kubelet's PodResources API as a second allocation record (merged with the
// checkpoint; disagreements reported), a stale checkpoint after a reboot onto other GPUs
// (optionally moved aside and kubelet restarted), and device plugins that stop answering
// (seed: nvmlInit hung inside the plugin and froze pod admission).
#pragma once

#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>

#include "core/config.h"
#include "kubeletapi/device_plugins.h"
#include "kubeletapi/pod_resources.h"
#include "kubeletapi/remediation.h"
#include "metrics/metrics.h"
#include "node/node_model.h"
#include "watch/event_loop.h"

namespace gdw {

class NodeHealthMonitor {
 public:
  // `on_allocations_changed` runs after a PodResources answer changed the merged allocations.
  NodeHealthMonitor(const Config& config, EventLoop& loop, Metrics& metrics, NodeModel& node,
                    std::function<void()> on_allocations_changed);
  ~NodeHealthMonitor();
  Status start();
  // The checkpoint or the inventory changed: judge staleness again (and remediate if asked).
  void checkpoint_or_inventory_changed();

 private:
  void poll_pod_resources();
  void on_pod_resources();
  void poll_plugins();
  void on_plugins();
  void remediate(const StaleCheckpointReport& report);

  const Config& config_;
  EventLoop& loop_;
  Metrics& metrics_;
  NodeModel& node_;
  std::function<void()> on_allocations_changed_;

  std::unique_ptr<PodResourcesClient> pod_resources_;
  EventSource pod_resources_io_;
  EventSource pod_resources_timer_;
  std::optional<std::string> pod_resources_state_;  // last logged: "ok" or the error kind
  std::set<std::string> disagreements_logged_;

  std::unique_ptr<DevicePluginProber> prober_;
  EventSource prober_io_;
  EventSource prober_timer_;
  std::map<std::string, bool> plugin_up_;  // socket → last state

  std::optional<bool> stale_;  // last judged
  std::unique_ptr<UnitRestart> restart_;
  std::optional<std::chrono::steady_clock::time_point> last_remediation_;
};

}  // namespace gdw
