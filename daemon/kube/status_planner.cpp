#include "kube/status_planner.h"

#include <algorithm>

namespace gdw::kube {
namespace {

void earliest(std::optional<Clock::time_point>& at, Clock::time_point t) {
  if (!at || t < *at) at = t;
}

}  // namespace

void StatusPlanner::observe(const DeviceAccessState& state, Clock::time_point now) {
  clock_.observe(state, now);
  started_ = true;
}

void StatusPlanner::set_gated_pods(const std::vector<GatedPod>& pods) {
  std::map<std::string, PodBook> books;
  for (const auto& g : pods) {
    auto before = pods_.find(g.pod.uid);
    PodBook book = before == pods_.end() ? PodBook{} : std::move(before->second);
    book.pod = g.pod;
    // Only a change in what the watch shows moves our belief: a watch event older than our
    // last write still shows the status before it.
    if (before == pods_.end() || g.observed != book.observed_seen) {
      book.observed_seen = g.observed;
      book.believed = g.observed;
    }
    books.emplace(g.pod.uid, std::move(book));
  }
  pods_ = std::move(books);
}

void StatusPlanner::judge(Clock::time_point now, WallClock::time_point wall) {
  const NodeConditions judged = judge_node(clock_, now, options_.grace);
  for (std::size_t i = 0; i < judged.size(); ++i) {
    const bool first = !delivered_ && current_[i].reason.empty();
    current_[i] = with_transition(judged[i], first ? std::nullopt : std::optional(current_[i]), wall);
  }
  for (auto& [uid, book] : pods_) {
    const bool ready = gate_ready(clock_, uid, now, options_.grace);
    book.current = with_transition(gate_condition(clock_, uid, ready, now, options_.grace), book.current, wall);
  }
}

bool StatusPlanner::node_due(Clock::time_point now) const {
  if (options_.node_path.empty() || !node_.ready(now, options_.min_interval)) return false;
  return !delivered_ || *delivered_ != current_ || (resync_at_ && now >= *resync_at_);
}

std::vector<PlannedWrite> StatusPlanner::plan(Clock::time_point now, WallClock::time_point wall) {
  std::vector<PlannedWrite> writes;
  if (!started_) return writes;  // nothing is known before the daemon's first count
  judge(now, wall);
  if (node_due(now)) {
    sending_ = current_;
    node_.in_flight = true;
    writes.push_back({true, "", options_.node_path, node_status_patch(current_, wall), false});
  }
  std::size_t in_flight = 0;
  for (const auto& [uid, book] : pods_) in_flight += book.delivery.in_flight;
  for (auto& [uid, book] : pods_) {
    if (in_flight >= options_.max_pods_in_flight) break;
    if (!book.current || book.believed == book.current->status || !book.delivery.ready(now, options_.min_interval))
      continue;
    book.delivery.in_flight = true;
    ++in_flight;
    writes.push_back({false, uid, pod_status_path(book.pod), pod_status_patch(book.pod, *book.current, wall),
                      book.current->status});
  }
  return writes;
}

void StatusPlanner::settle(Delivery& d, bool delivered, Clock::time_point now) const {
  d.in_flight = false;
  d.last_sent = now;
  if (delivered) {
    d.failures = 0;
    d.retry_at = {};
    return;
  }
  ++d.failures;
  auto backoff = options_.backoff_first;
  for (int i = 1; i < d.failures && backoff < options_.backoff_max; ++i) backoff *= 2;
  d.retry_at = now + std::min(backoff, options_.backoff_max);
}

void StatusPlanner::written(const PlannedWrite& write, bool delivered, Clock::time_point now) {
  if (write.node) {
    settle(node_, delivered, now);
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
  for (auto& [uid, book] : pods_) book.delivery.in_flight = false;
}

std::optional<Clock::time_point> StatusPlanner::next_wake(Clock::time_point now) const {
  std::optional<Clock::time_point> next;
  if (!started_) return next;
  if (auto expiry = clock_.next_expiry(now, options_.grace)) earliest(next, *expiry);
  if (!options_.node_path.empty() && !node_.in_flight) {
    const NodeConditions judged = judge_node(clock_, now, options_.grace);
    bool changed = !delivered_;
    for (std::size_t i = 0; delivered_ && i < judged.size(); ++i) {
      const auto& d = (*delivered_)[i];
      changed |= d.status != judged[i].status || d.reason != judged[i].reason || d.message != judged[i].message;
    }
    if (changed) earliest(next, node_.earliest(options_.min_interval));
    if (resync_at_) earliest(next, std::max(*resync_at_, node_.earliest(options_.min_interval)));
  }
  for (const auto& [uid, book] : pods_) {
    if (book.delivery.in_flight) continue;
    const bool ready = gate_ready(clock_, uid, now, options_.grace);
    if (book.believed != ready) earliest(next, book.delivery.earliest(options_.min_interval));
  }
  if (next && *next < now) next = now;
  return next;
}

}  // namespace gdw::kube
