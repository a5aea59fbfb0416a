// Which status writes are due: the node's three conditions and the readiness gate of each
// pod that declares it. Pure (times are arguments), so every rule is table-tested in
// memory; the reporter on the loop (status_reporter.h) feeds it and sends what it plans.
//
// Nothing claims what has not been checked. At start the node is read first (its
// conditions as a previous run left them); a condition the node does not have is written
// "Unknown" (NotYetChecked); nothing else is written until the daemon's first whole check
// (every container, after the allocation records' first answers, and both node faults
// judged). A condition that was "True" keeps its lastTransitionTime and its grace runs from
// there: the problems the first check finds count as lasting. A pod's gate that was "False"
// stays "False" the same way. The gate is "True" only once the pod runs with every
// container started and a check came after that (judge_gate).
//
// Node: all three conditions in one PATCH at the first check, whenever one of them
// changes (status, reason or message), and every `resync` after the last delivered write.
// lastTransitionTime moves only when a condition's status does. Pods: a gated pod is
// written when what it should say differs from what the API server has as far as we know
// (the watch's view, or our last delivered write). Bounded: one node request and at most
// `max_pods_in_flight` pod writes in flight, one write per object per `min_interval`, a
// failed request retried after a back-off that doubles up to `backoff_max`.
#pragma once

#include <map>
#include <optional>
#include <string>
#include <vector>

#include "kube/backoff.h"
#include "kube/conditions.h"
#include "kube/node_prior.h"

namespace gdw::kube {

struct StatusOptions {
  std::string node_path;  // .../nodes/<node>/status; empty: no node conditions (no valid node name)
  Clock::duration grace = std::chrono::seconds(10);
  Clock::duration resync = std::chrono::minutes(5);
  Clock::duration min_interval = std::chrono::seconds(1);
  Clock::duration backoff_first = std::chrono::seconds(1);
  Clock::duration backoff_max = std::chrono::seconds(60);
  // Each back-off is drawn from [d·(1 − jitter/2), d·(1 + jitter/2)) (kube/backoff.h), so
  // that the nodes of a cluster that failed together do not retry together.
  double jitter = 0.5;
  std::uint64_t seed = 1;
  std::size_t max_pods_in_flight = 8;
};

// A pod that declares the gate, as the watch has it.
struct GatedPod {
  PodRef pod;
  std::optional<bool> observed;  // the gate condition's status on the API server; nullopt: absent
  bool started = false;          // Running, and every container it declares has started
};

struct PlannedWrite {
  bool node = true;   // else the pod `pod_uid`
  bool read = false;  // node: a GET of the node (its conditions as they stand), not a write
  std::string pod_uid;
  std::string path;
  std::string body;
  bool status = false;  // a pod: the gate's status written
};

class StatusPlanner {
 public:
  explicit StatusPlanner(StatusOptions options)
      : options_(std::move(options)),
        backoff_(options_.backoff_first, options_.backoff_max, options_.jitter, options_.seed) {}
  void set_options(StatusOptions options) {
    options_ = std::move(options);
    backoff_ = Backoff(options_.backoff_first, options_.backoff_max, options_.jitter, options_.seed);
  }

  // The daemon's snapshot (its container gauges were recounted). One that is not
  // `checked` is no verdict: the last checked one stands.
  void observe(const DeviceAccessState& state, Clock::time_point now);
  // Every pod that declares the gate now (the whole set, each time the watch changed it).
  void set_gated_pods(const std::vector<GatedPod>& pods, Clock::time_point now);
  // The requests due now; each is in flight until written() (or, a read, node_read()).
  std::vector<PlannedWrite> plan(Clock::time_point now, WallClock::time_point wall);
  void written(const PlannedWrite& write, bool delivered, Clock::time_point now);
  // The node read's answer: our conditions as the node had them.
  void node_read(const PriorConditions& prior, Clock::time_point now);
  // The requests in flight will never have an outcome (their worker is gone): planned again.
  void abandon_in_flight();
  // When plan() next may have something to do without new input; nullopt: nothing pending.
  std::optional<Clock::time_point> next_wake(Clock::time_point now) const;
  // Whether a pod waits for a check of the containers after they started (the daemon then
  // recounts them); true once per wish.
  bool take_wanted_check();

  // The node conditions have been judged from a check (node_conditions() is a verdict).
  bool started() const { return judged_; }
  // The node conditions as last judged (all "False" before the first check).
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
    bool started = false;
    std::optional<Clock::time_point> started_at;  // when the watch first showed it started
    bool carry = false;  // first seen "False": its problems keep their grace at the next judgement
    std::optional<ConditionState> current;
    Delivery delivery;
  };
  // Node read and first check in: verdicts may be judged and written.
  bool ready() const { return checked_ && (node_read_ || options_.node_path.empty()); }
  void carry_over(Clock::time_point now, WallClock::time_point wall);
  void judge(Clock::time_point now, WallClock::time_point wall);
  GateVerdict gate_of(const std::string& uid, const PodBook& book, Clock::time_point now) const;
  // The status a pod's gate is to be written with now; nullopt: nothing to write.
  std::optional<bool> pod_due(const std::string& uid, const PodBook& book, Clock::time_point now) const;
  std::optional<PlannedWrite> plan_node(Clock::time_point now, WallClock::time_point wall);
  bool node_pending(Clock::time_point now) const;
  bool node_due(Clock::time_point now) const;
  void settle(Delivery& d, bool delivered, Clock::time_point now);

  StatusOptions options_;
  Backoff backoff_;
  ProblemClock clock_;
  bool checked_ = false;
  std::optional<Clock::time_point> last_check_;
  bool wants_check_ = false;
  bool node_read_ = false;
  PriorConditions prior_{};
  bool node_carried_ = false;
  bool unknown_delivered_ = false;
  bool sending_unknown_ = false;
  bool judged_ = false;
  NodeConditions current_{};
  std::optional<NodeConditions> delivered_;
  NodeConditions sending_{};
  Delivery node_;
  std::optional<Clock::time_point> resync_at_;
  std::map<std::string, PodBook> pods_;  // by UID
};

// The path of the node object itself, from its status path.
std::string node_object_path(const std::string& node_status_path);

}  // namespace gdw::kube
