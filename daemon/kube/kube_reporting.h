// The daemon's Kubernetes side in one object: one API worker (event_sender.h), shared by
// Kubernetes Events (event_reporter.h) and the node conditions and pod readiness gate
// (status_reporter.h, with its pod watch). The daemon makes it at start and again at each
// SIGHUP (the kubernetes.* keys may have changed) and hands the new one the old one. The
// container fleet reports which containers miss devices after each recount of its gauges,
// the daemon the node faults its health monitor judged.
#pragma once

#include <functional>
#include <memory>
#include <optional>

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
  // `previous` (SIGHUP) is stopped first; its conditions' memory carries over. `recount`:
  // the daemon counts its containers again (container_problems() follows).
  static std::unique_ptr<KubeReporting> create(const Config& config, EventLoop& loop, Metrics& metrics,
                                               std::unique_ptr<KubeReporting> previous,
                                               std::function<void()> recount = nullptr);
  ~KubeReporting();
  KubeReporting(const KubeReporting&) = delete;
  KubeReporting& operator=(const KubeReporting&) = delete;

  EventReporter* events() const { return events_.get(); }  // nullptr: events off
  // The containers that do not hold their devices now (after each gauge recount).
  void container_problems(std::vector<ContainerProblem> problems);
  // The node faults as last judged: a stale checkpoint, device plugins not answering;
  // nullopt while not judged yet.
  void node_faults(std::optional<bool> checkpoint_stale, std::optional<std::vector<std::string>> unresponsive_plugins);
  // Every container has been checked, after the allocation records' first answers: the
  // snapshots from now on are verdicts (once the node faults are judged too).
  void containers_checked();
  // The containers are counted again from nothing (the node's inputs start over): the
  // snapshots are no verdict until containers_checked() again.
  void containers_unchecked();

 private:
  KubeReporting() = default;

  void update();

  DeviceAccessState state_;  // the reports together, as last told
  bool containers_checked_ = false;
  bool faults_judged_ = false;
  std::unique_ptr<EventReporter> events_;
  std::unique_ptr<StatusReporter> status_;
  std::unique_ptr<EventSender> sender_;  // last: its worker stops before the reporters go
};

}  // namespace gdw::kube
