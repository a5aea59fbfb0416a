#include "kube/status_planner.h"

#include <algorithm>

namespace gdw::kube {
namespace {

void earliest(std::optional<Clock::time_point>& at, Clock::time_point t) {
  if (!at || t < *at) at = t;
}

bool any_absent(const PriorConditions& prior) {
  return std::any_of(prior.begin(), prior.end(), [](const auto& p) { return !p.has_value(); });
}

}  // namespace

std::string node_object_path(const std::string& node_status_path) {
  const std::string suffix = "/status";
  if (node_status_path.size() <= suffix.size() ||
      node_status_path.compare(node_status_path.size() - suffix.size(), suffix.size(), suffix) != 0)
    return "";
  return node_status_path.substr(0, node_status_path.size() - suffix.size());
}

void StatusPlanner::observe(const DeviceAccessState& state, Clock::time_point now) {
  if (!state.checked) return;  // not a verdict: the last checked snapshot stands
  clock_.observe(state, now);
  checked_ = true;
  last_check_ = now;
}

void StatusPlanner::set_gated_pods(const std::vector<GatedPod>& pods, Clock::time_point now) {
  std::map<std::string, PodBook> books;
  for (const auto& g : pods) {
    auto before = pods_.find(g.pod.uid);
    const bool fresh = before == pods_.end();
    PodBook book = fresh ? PodBook{} : std::move(before->second);
    book.pod = g.pod;
    // Only a change in what the watch shows moves our belief: a watch event older than our
    // last write still shows the status before it.
    if (fresh || g.observed != book.observed_seen) {
      book.observed_seen = g.observed;
      book.believed = g.observed;
    }
    // A gate already "False" when this daemon first sees the pod (a restart) stays so
    // until a check clears it: its problems keep their grace.
    if (fresh) book.carry = g.observed == std::optional<bool>(false);
    if (g.started && !book.started) book.started_at = now;
    if (!g.started) book.started_at.reset();
    book.started = g.started;
    books.emplace(g.pod.uid, std::move(book));
  }
  pods_ = std::move(books);
}

void StatusPlanner::node_read(const PriorConditions& prior, Clock::time_point now) {
  settle(node_, true, now);
  node_.last_sent.reset();  // a read spaces no write
  prior_ = prior;
  node_read_ = true;
  unknown_delivered_ = !any_absent(prior);
}

void StatusPlanner::carry_over(Clock::time_point now, WallClock::time_point wall) {
  if (!node_carried_ && node_read_) {
    node_carried_ = true;
    // "True" since T: its problems have lasted since T - grace at the latest.
    if (auto p = prior_state(prior_[0]); p && p->status) {
      const auto age = std::max(Clock::duration::zero(),
                                std::chrono::duration_cast<Clock::duration>(wall - p->last_transition));
      clock_.backdate("", now - age - options_.grace);
    }
  }
  for (auto& [uid, book] : pods_) {
    if (!book.carry) continue;
    book.carry = false;
    clock_.backdate(uid, now - options_.grace);
  }
}

GateVerdict StatusPlanner::gate_of(const std::string& uid, const PodBook& book, Clock::time_point now) const {
  const bool checked = book.started_at && last_check_ && *last_check_ > *book.started_at;
  return judge_gate(clock_, uid, book.started, checked, now, options_.grace);
}

void StatusPlanner::judge(Clock::time_point now, WallClock::time_point wall) {
  carry_over(now, wall);
  const NodeConditions judged = judge_node(clock_, now, options_.grace);
  for (std::size_t i = 0; i < judged.size(); ++i) {
    const auto before = judged_ ? std::optional(current_[i]) : prior_state(prior_[i]);
    current_[i] = with_transition(judged[i], before, wall);
  }
  judged_ = true;
  for (auto& [uid, book] : pods_) {
    const GateVerdict v = gate_of(uid, book, now);
    book.current = with_transition(v.condition, book.current, wall);
    if (book.started && v.condition.reason == "NotYetChecked") wants_check_ = true;
  }
}

std::optional<bool> StatusPlanner::pod_due(const std::string& uid, const PodBook& book, Clock::time_point now) const {
  const GateVerdict v = gate_of(uid, book, now);
  const bool want = v.condition.status;
  if (book.believed == want) return std::nullopt;
  if (!want && !v.firm && !book.believed) return std::nullopt;  // "not yet" over an absent gate: unready already
  return want;
}

bool StatusPlanner::node_due(Clock::time_point now) const {
  return !delivered_ || *delivered_ != current_ || (resync_at_ && now >= *resync_at_);
}

std::optional<PlannedWrite> StatusPlanner::plan_node(Clock::time_point now, WallClock::time_point wall) {
  if (options_.node_path.empty() || !node_.ready(now, options_.min_interval)) return std::nullopt;
  PlannedWrite w{true, false, "", options_.node_path, "", false};
  if (!node_read_) {
    w.read = true;
    // From the API server's cache (resourceVersion=0), not a quorum read of etcd.
    w.path = node_object_path(options_.node_path) + "?resourceVersion=0";
  } else if (!checked_) {
    if (unknown_delivered_) return std::nullopt;
    w.body = node_unknown_patch(prior_, wall);
    sending_unknown_ = true;
  } else {
    if (!node_due(now)) return std::nullopt;
    sending_ = current_;
    sending_unknown_ = false;
    w.body = node_status_patch(current_, wall);
  }
  node_.in_flight = true;
  return w;
}

std::vector<PlannedWrite> StatusPlanner::plan(Clock::time_point now, WallClock::time_point wall) {
  std::vector<PlannedWrite> writes;
  if (ready()) judge(now, wall);
  if (auto w = plan_node(now, wall)) writes.push_back(std::move(*w));
  if (!ready()) return writes;
  std::size_t in_flight = 0;
  for (const auto& [uid, book] : pods_) in_flight += book.delivery.in_flight;
  for (auto& [uid, book] : pods_) {
    if (in_flight >= options_.max_pods_in_flight) break;
    if (!book.current || !book.delivery.ready(now, options_.min_interval) || !pod_due(uid, book, now)) continue;
    book.delivery.in_flight = true;
    ++in_flight;
    writes.push_back({false, false, uid, pod_status_path(book.pod), pod_status_patch(book.pod, *book.current, wall),
                      book.current->status});
  }
  return writes;
}

void StatusPlanner::settle(Delivery& d, bool delivered, Clock::time_point now) {
  d.in_flight = false;
  d.last_sent = now;
  if (delivered) {
    d.failures = 0;
    d.retry_at = {};
    return;
  }
  ++d.failures;
  d.retry_at = now + backoff_.after(d.failures);
}

void StatusPlanner::written(const PlannedWrite& write, bool delivered, Clock::time_point now) {
  if (write.node) {
    settle(node_, delivered, now);
    if (write.read) {
      if (delivered) node_.last_sent.reset();
      return;
    }
    if (sending_unknown_) {
      sending_unknown_ = false;
      unknown_delivered_ |= delivered;
      return;
    }
    if (delivered) {
      delivered_ = sending_;
      resync_at_ = now + options_.resync;
    }
    return;
  }
  auto it = pods_.find(write.pod_uid);
  if (it == pods_.end()) return;  // the pod went meanwhile
  settle(it->second.delivery, delivered, now);
  if (delivered) it->second.believed = write.status;
}

void StatusPlanner::abandon_in_flight() {
  node_.in_flight = false;
  sending_unknown_ = false;
  for (auto& [uid, book] : pods_) book.delivery.in_flight = false;
}

bool StatusPlanner::take_wanted_check() {
  const bool wanted = wants_check_;
  wants_check_ = false;
  return wanted;
}

bool StatusPlanner::node_pending(Clock::time_point now) const {
  if (!node_read_) return true;
  if (!checked_) return !unknown_delivered_;
  if (!delivered_) return true;
  const NodeConditions judged = judge_node(clock_, now, options_.grace);
  for (std::size_t i = 0; i < judged.size(); ++i) {
    const auto& d = (*delivered_)[i];
    if (d.status != judged[i].status || d.reason != judged[i].reason || d.message != judged[i].message) return true;
  }
  return false;
}

std::optional<Clock::time_point> StatusPlanner::next_wake(Clock::time_point now) const {
  std::optional<Clock::time_point> next;
  if (ready()) {
    if (auto expiry = clock_.next_expiry(now, options_.grace)) earliest(next, *expiry);
  }
  if (!options_.node_path.empty() && !node_.in_flight) {
    if (node_pending(now)) earliest(next, node_.earliest(options_.min_interval));
    if (resync_at_) earliest(next, std::max(*resync_at_, node_.earliest(options_.min_interval)));
  }
  for (const auto& [uid, book] : pods_) {
    if (!ready() || book.delivery.in_flight) continue;
    if (pod_due(uid, book, now)) earliest(next, book.delivery.earliest(options_.min_interval));
  }
  if (next && *next < now) next = now;
  return next;
}

}  // namespace gdw::kube
