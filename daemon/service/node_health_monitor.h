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
#include "kubeletapi/remediation.h"
#include "metrics/health_metrics.h"
#include "node/node_model.h"
#include "node/stale_remediation.h"
#include "service/health_gatherer.h"
#include "service/nvml_runner.h"
#include "watch/event_loop.h"

namespace gdw {

// The container cgroups on the node, for the stale-checkpoint remediation's "never while a
// running container holds a device it names" rule (the container fleet has them).
class ContainerLister {
 public:
  virtual ~ContainerLister() = default;
  virtual std::vector<RunningContainer> running_containers() const = 0;
};

// What the monitor tells its owner, when it happens on the loop.
enum class HealthChange {
  kAllocations,   // a PodResources answer (or an inventory re-read of ours) changed what containers resolve to
  kFirstAnswers,  // the first PodResources call has an outcome (answer or error), once
  kFaults,        // checkpoint_stale() or unresponsive_plugins() changed (node conditions)
};

class NodeHealthMonitor {
 public:
  // `nvml`: asked again (forced) when a stale verdict rests on MIG devices; its outcome
  // comes back through inventory_refreshed(). `changed` runs on the loop, after the change.
  NodeHealthMonitor(const Config& config, EventLoop& loop, Metrics& metrics, NodeModel& node,
                    const ContainerLister& containers, NvmlRunner& nvml, std::function<void(HealthChange)> changed);
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
  bool first_answers_in() const {
    return !gatherer_ || !gatherer_->asks_pod_resources() || !pod_resources_timer_ || pod_resources_answered_;
  }
  // The node faults as last judged (node conditions).
  bool checkpoint_stale() const { return stale_.value_or(false); }
  std::vector<std::string> unresponsive_plugins() const;
  // The same, nullopt until first judged (the checkpoint read, the first round of probes).
  std::optional<bool> checkpoint_verdict() const { return stale_; }
  std::optional<std::vector<std::string>> plugins_verdict() const {
    return plugins_probed_ ? std::optional(unresponsive_plugins()) : std::nullopt;
  }

 private:
  void poll_pod_resources();
  void on_pod_resources();
  void take_pod_resources(std::vector<PodResourcesContainer> containers);
  void first_answer();
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
  HealthMetrics metrics_;
  NodeModel& node_;
  const ContainerLister& containers_;
  NvmlRunner& nvml_;
  std::function<void(HealthChange)> changed_;

  std::unique_ptr<HealthGatherer> gatherer_;
  EventSource pod_resources_io_;
  EventSource pod_resources_timer_;
  std::optional<std::string> pod_resources_state_;  // last logged: "ok" or the error kind
  bool pod_resources_answered_ = false;
  LogOncePer<std::string> disagreements_logged_;  // logged once each while they last

  EventSource prober_io_;
  EventSource prober_timer_;
  std::map<std::string, bool> plugin_up_;  // socket → last state
  bool plugins_probed_ = false;            // a first round is in (or there was nothing to ask)

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
