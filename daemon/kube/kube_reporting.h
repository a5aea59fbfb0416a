// The daemon's Kubernetes side in one object: one API worker (event_sender.h), shared by
// Kubernetes Events (event_reporter.h) and the node conditions and pod readiness gate
// (status_reporter.h, with its pod watch). The daemon makes it at start and again at each
// SIGHUP (the kubernetes.* keys may have changed) and hands the new one the old one. The
// container fleet reports which containers miss devices after each recount of its gauges,
// the daemon the node faults its health monitor judged.
#pragma once

#include <memory>

#include "core/config.h"
#include "kube/conditions.h"
#include "kube/event_reporter.h"
#include "kube/event_sender.h"
#include "kube/status_reporter.h"
#include "metrics/metrics.h"
#include "watch/event_loop.h"

namespace gdw::kube {

class KubeReporting {
 public:
  // nullptr when events and conditions are both off (each logged once, with the reason).
  // `previous` (SIGHUP) is stopped first; its conditions' memory carries over.
  static std::unique_ptr<KubeReporting> create(const Config& config, EventLoop& loop, Metrics& metrics,
                                               std::unique_ptr<KubeReporting> previous);
  ~KubeReporting();
  KubeReporting(const KubeReporting&) = delete;
  KubeReporting& operator=(const KubeReporting&) = delete;

  EventReporter* events() const { return events_.get(); }  // nullptr: events off
  // The containers that do not hold their devices now (after each gauge recount).
  void container_problems(std::vector<ContainerProblem> problems);
  // The node faults as last judged: a stale checkpoint, device plugins not answering.
  void node_faults(bool checkpoint_stale, std::vector<std::string> unresponsive_plugins);

 private:
  KubeReporting() = default;

  DeviceAccessState state_;  // the two reports together, as last told
  std::unique_ptr<EventReporter> events_;
  std::unique_ptr<StatusReporter> status_;
  std::unique_ptr<EventSender> sender_;  // last: its worker stops before the reporters go
};

}  // namespace gdw::kube
