// Node conditions and the pod readiness gate, from the daemon's event loop: it takes the
// daemon's snapshot (update(), when the container gauges are recounted) and the pod watch's
// gated pods, lets the planner (status_planner.h) decide, and hands the writes to the
// events' worker (event_sender.h). A loop timer wakes it when a grace, a back-off or the
// resync ends without new input. Nothing here waits on the network: writes and their
// outcomes cross threads through the sender's queue and an eventfd.
#pragma once

#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "core/config.h"
#include "kube/event_sender.h"
#include "kube/pod_watcher.h"
#include "kube/status_planner.h"
#include "metrics/daemon_metrics.h"
#include "metrics/metrics.h"
#include "metrics/status_metrics.h"
#include "watch/event_loop.h"

namespace gdw::kube {

// Whether conditions are on under `config` and the process environment, and where they
// go; nullopt with `why` set when off.
std::optional<ApiEndpoint> conditions_endpoint(const Config& config, std::string& why);

class StatusReporter {
 public:
  // `carried`: the planner of the reporter this one replaces (SIGHUP), so transition
  // times, grace clocks and what was delivered survive; nullptr at start. `recount`: asks
  // the daemon for a fresh snapshot (update()), when a pod's containers started after the
  // last one.
  static Result<std::unique_ptr<StatusReporter>> create(const Config& config, const ApiEndpoint& endpoint,
                                                        const std::string& node, EventLoop& loop, Metrics& metrics,
                                                        EventSender& sender, std::unique_ptr<StatusPlanner> carried,
                                                        std::function<void()> recount);
  ~StatusReporter();
  StatusReporter(const StatusReporter&) = delete;
  StatusReporter& operator=(const StatusReporter&) = delete;

  // The daemon's snapshot: the containers without their devices now and the node faults.
  void update(const DeviceAccessState& state);
  // The planner, for the reporter that replaces this one. Call it after the sender's
  // worker is joined: writes still in flight are then planned again.
  std::unique_ptr<StatusPlanner> release();

 private:
  struct Outcome {
    PlannedWrite write;
    SendOutcome outcome;
    long http_status;
    std::string detail;
  };
  StatusReporter(Metrics& metrics, EventSender& sender, std::unique_ptr<StatusPlanner> planner, std::string server);
  Status attach(EventLoop& loop);
  void tick();
  void send(std::vector<PlannedWrite> writes);
  void on_wake();  // loop: outcomes and the watch's news
  void take_outcomes();
  void take_watch();
  void report_outcome(const Outcome& o);
  void report_conditions(const NodeConditions& before);
  void take_node_read(const Outcome& o);

  StatusMetrics metrics_;
  DaemonMetrics loop_metrics_;
  EventSender& sender_;
  std::unique_ptr<StatusPlanner> planner_;
  std::string server_;
  std::function<void()> recount_;
  gdw::EventSource timer_;
  gdw::EventSource wake_source_;
  int wake_fd_ = -1;
  std::mutex mu_;
  std::vector<Outcome> outcomes_;  // from the worker thread
  std::optional<SendOutcome> last_node_outcome_, last_pod_outcome_;
  std::uint64_t watch_generation_ = 0;
  std::string watch_problem_;
  PodWatchView watch_seen_;  // counters as last exported
  std::unique_ptr<PodWatcher> watcher_;  // last: its thread stops before the rest goes
};

}  // namespace gdw::kube
