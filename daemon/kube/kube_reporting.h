// The daemon's Kubernetes side in one object: one API worker (event_sender.h), shared by
// Kubernetes Events (event_reporter.h) and the node conditions and pod readiness gate
// (status_reporter.h, with its pod watch). The daemon makes it at start and again at each
// SIGHUP (the kubernetes.* keys may have changed), hands the new one the old one, and
// calls device_access() whenever it recounts its container gauges.
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
  // The daemon's snapshot, after each recount of its container gauges.
  void device_access(const DeviceAccessState& state) {
    if (status_) status_->update(state);
  }

 private:
  KubeReporting() = default;

  std::unique_ptr<EventReporter> events_;
  std::unique_ptr<StatusReporter> status_;
  std::unique_ptr<EventSender> sender_;  // last: its worker stops before the reporters go
};

}  // namespace gdw::kube
