// Which status writes are due: the node's three conditions and the readiness gate of each
// pod that declares it. Pure (times are arguments), so every rule is table-tested in
// memory; the reporter on the loop (status_reporter.h) feeds it and sends what it plans.
//
// Node: all three conditions in one PATCH, at the first snapshot, whenever one of them
// changes (status, reason or message), and every `resync` after the last delivered write.
// lastTransitionTime moves only when a condition's status does. Pods: a gated pod is
// written when what it should say differs from what the API server has as far as we know
// (the watch's view, or our last delivered write). Bounded: one node write and at most
// `max_pods_in_flight` pod writes in flight, one write per object per `min_interval`, a
// failed write retried after a back-off that doubles up to `backoff_max`.
#pragma once

#include <map>
#include <optional>
#include <string>
#include <vector>

#include "kube/conditions.h"

namespace gdw::kube {

struct StatusOptions {
  std::string node_path;  // empty: no node conditions (no valid node name)
  Clock::duration grace = std::chrono::seconds(10);
  Clock::duration resync = std::chrono::minutes(5);
  Clock::duration min_interval = std::chrono::seconds(1);
  Clock::duration backoff_first = std::chrono::seconds(1);
  Clock::duration backoff_max = std::chrono::seconds(60);
  std::size_t max_pods_in_flight = 8;
};

// A pod that declares the gate, as the watch has it.
struct GatedPod {
  PodRef pod;
  std::optional<bool> observed;  // the gate condition's status on the API server; nullopt: absent
};

struct PlannedWrite {
  bool node = true;     // else the pod `pod_uid`
  std::string pod_uid;
  std::string path;
  std::string body;
  bool status = false;  // a pod: the gate's status written
};

class StatusPlanner {
 public:
  explicit StatusPlanner(StatusOptions options) : options_(std::move(options)) {}
  void set_options(StatusOptions options) { options_ = std::move(options); }

  // The daemon's snapshot (its container gauges were recounted).
  void observe(const DeviceAccessState& state, Clock::time_point now);
  // Every pod that declares the gate now (the whole set, each time the watch changed it).
  void set_gated_pods(const std::vector<GatedPod>& pods);
  // The writes due now; each is in flight until written() is called for it.
  std::vector<PlannedWrite> plan(Clock::time_point now, WallClock::time_point wall);
  void written(const PlannedWrite& write, bool delivered, Clock::time_point now);
  // The writes in flight will never have an outcome (their worker is gone): planned again.
  void abandon_in_flight();
  // When plan() next may have something to do without new input; nullopt: nothing pending.
  std::optional<Clock::time_point> next_wake(Clock::time_point now) const;

  bool started() const { return started_; }
  // The node conditions as last judged (all "False" before the first snapshot).
  const NodeConditions& node_conditions() const { return current_; }
  std::size_t gated_pods() const { return pods_.size(); }

 private:
  struct Delivery {
    bool in_flight = false;
    int failures = 0;
    Clock::time_point retry_at{};
    std::optional<Clock::time_point> last_sent;
    bool ready(Clock::time_point now, Clock::duration min_interval) const {
      return !in_flight && now >= retry_at && (!last_sent || now >= *last_sent + min_interval);
    }
    Clock::time_point earliest(Clock::duration min_interval) const {
      return std::max(retry_at, last_sent ? *last_sent + min_interval : Clock::time_point{});
    }
  };
  struct PodBook {
    PodRef pod;
    std::optional<bool> observed_seen;  // the watch's view, as last taken
    std::optional<bool> believed;       // what the API server has, as far as we know
    std::optional<ConditionState> current;
    Delivery delivery;
  };
  void judge(Clock::time_point now, WallClock::time_point wall);
  bool node_due(Clock::time_point now) const;
  void settle(Delivery& d, bool delivered, Clock::time_point now) const;

  StatusOptions options_;
  ProblemClock clock_;
  bool started_ = false;
  NodeConditions current_{};
  std::optional<NodeConditions> delivered_;
  NodeConditions sending_{};
  Delivery node_;
  std::optional<Clock::time_point> resync_at_;
  std::map<std::string, PodBook> pods_;  // by UID
};

}  // namespace gdw::kube
