// The node faults that sit beside device drift, watched from the daemon's loop without ever
// blocking it: kubelet's PodResources API as a second allocation record (merged with the
// checkpoint; disagreements reported), a stale checkpoint after a reboot onto other GPUs
// (optionally moved aside and kubelet restarted), and device plugins that stop answering
// (seed: nvmlInit hung inside the plugin and froze pod admission).
//
// A stale checkpoint is remediated only as node/stale_remediation.h allows: against a fresh
// inventory (NVML asked again through the daemon), confirmed by a second fresh verdict
// kubelet.stale_confirm_after later, and never while a running container holds a device
// the checkpoint names. Why it is held back is logged once per reason and exported.
#pragma once

#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>

#include "core/config.h"
#include "core/log_once.h"
#include "kubeletapi/device_plugins.h"
#include "kubeletapi/pod_resources.h"
#include "kubeletapi/remediation.h"
#include "metrics/metrics.h"
#include "node/node_model.h"
#include "node/stale_remediation.h"
#include "watch/event_loop.h"

namespace gdw {

// What the monitor needs from the daemon.
struct NodeHealthHooks {
  // Runs after a PodResources answer (or an inventory re-read of ours) changed what
  // containers resolve to.
  std::function<void()> on_allocations_changed;
  // Starts a NVML query, even when no allocated MIG device is unmapped; false when none can
  // start now (a failed one backs off). Its outcome comes to inventory_refreshed().
  std::function<bool()> requery_nvml;
  // The container cgroups the daemon discovered.
  std::function<std::vector<RunningContainer>()> running_containers;
  // Runs once, when the first PodResources call has an outcome (answer or error), after
  // the containers were re-resolved against it.
  std::function<void()> on_first_answers;
  // Runs when checkpoint_stale() or unresponsive_plugins() changed.
  std::function<void()> on_faults_changed;
};

class NodeHealthMonitor {
 public:
  NodeHealthMonitor(const Config& config, EventLoop& loop, Metrics& metrics, NodeModel& node, NodeHealthHooks hooks);
  ~NodeHealthMonitor();
  Status start();
  // The checkpoint or the inventory changed: judge staleness again (and remediate if asked).
  void checkpoint_or_inventory_changed();
  // A NVML query started at `started` ended: answered and merged into the inventory (`ok`),
  // or failed or timed out.
  void inventory_refreshed(bool ok, std::chrono::steady_clock::time_point started);
  // Whether the allocation records are in: the checkpoint (read at start) and, when
  // PodResources is used, its first outcome. Until then a GPU container only PodResources
  // names is not known as one (READY=1 waits for this).
  bool first_answers_in() const { return !pod_resources_ || !pod_resources_timer_ || pod_resources_answered_; }
  // The node faults as last judged (node conditions).
  bool checkpoint_stale() const { return stale_.value_or(false); }
  std::vector<std::string> unresponsive_plugins() const;

 private:
  void poll_pod_resources();
  void on_pod_resources();
  void take_pod_resources(std::vector<PodResourcesContainer> containers);
  void poll_plugins();
  void on_plugins();
  // `depth`: how often this judgement re-ran itself after a synchronous refresh.
  void judge(int depth = 0);
  void act(const RemediationDecision& decision, const std::vector<std::string>& holders);
  void request_refresh(const StaleCheckpointReport& report);
  void report_hold(RemediationHold hold, const std::vector<std::string>& holders);
  void arm_recheck(std::chrono::steady_clock::time_point at);
  void remediate(const StaleCheckpointReport& report);

  const Config& config_;
  EventLoop& loop_;
  Metrics& metrics_;
  NodeModel& node_;
  NodeHealthHooks hooks_;

  std::unique_ptr<PodResourcesClient> pod_resources_;
  EventSource pod_resources_io_;
  EventSource pod_resources_timer_;
  std::optional<std::string> pod_resources_state_;  // last logged: "ok" or the error kind
  bool pod_resources_answered_ = false;
  LogOncePer<std::string> disagreements_logged_;  // logged once each while they last

  std::unique_ptr<DevicePluginProber> prober_;
  EventSource prober_io_;
  EventSource prober_timer_;
  std::map<std::string, bool> plugin_up_;  // socket → last state

  std::optional<bool> stale_;  // last judged
  // The remediation's confirmation state, for one piece of evidence (stale_evidence_key).
  struct StaleWatch {
    std::string evidence;
    bool fresh = false;            // a refresh completed that no check has used yet
    bool refresh_pending = false;  // asked, outcome not in yet
    bool refresh_failed = false;
    std::chrono::steady_clock::time_point refresh_asked{};
    std::optional<std::chrono::steady_clock::time_point> since;
    std::optional<std::chrono::steady_clock::time_point> next_check;
    RemediationHold pending_hold = RemediationHold::kNone;
    RemediationHold logged_hold = RemediationHold::kNone;
  } watch_;
  EventSource recheck_timer_;
  std::unique_ptr<UnitRestart> restart_;
  std::optional<std::chrono::steady_clock::time_point> last_remediation_;
};

}  // namespace gdw
