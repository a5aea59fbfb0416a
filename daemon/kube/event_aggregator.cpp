#include "kube/event_aggregator.h"

#include <algorithm>

namespace gdw::kube {
namespace {

constexpr std::chrono::seconds kBudgetPeriod{60};

}  // namespace

Clock::time_point EventAggregator::slot(const std::string& pod_uid, Clock::time_point now) {
  auto it = writes_.find(pod_uid);
  if (it == writes_.end()) return now;
  auto& times = it->second;
  while (!times.empty() && now - times.front() >= kBudgetPeriod) times.pop_front();
  if (times.empty()) {
    writes_.erase(it);
    return now;
  }
  if (times.size() < options_.writes_per_minute) return now;
  return times[times.size() - options_.writes_per_minute] + kBudgetPeriod;
}

EventWrite EventAggregator::write_of(Tracked& t, Clock::time_point now) {
  writes_[t.state.pod.uid].push_back(now);
  EventWrite w;
  w.create_path = events_path(t.state.pod.pod_namespace);
  w.create_body = create_body(t.state, options_.source);
  if (t.created) {
    w.verb = EventWrite::Verb::kPatch;
    w.path = event_path(t.state.pod.pod_namespace, t.state.name);
    w.body = patch_body(t.state);
  } else {
    w.verb = EventWrite::Verb::kCreate;
    w.path = w.create_path;
    w.body = w.create_body;
  }
  t.created = true;
  t.pending = false;
  return w;
}

std::vector<EventWrite> EventAggregator::record(const Incident& incident, Clock::time_point now,
                                                WallClock::time_point wall, bool* invalid) {
  if (invalid) *invalid = false;
  if (!valid_pod_ref(incident.pod)) {
    if (invalid) *invalid = true;
    return {};
  }
  const Key key{incident.pod.uid, incident.reason, incident.key};
  auto it = events_.find(key);
  if (it != events_.end() && now - it->second.seen > options_.window && !it->second.pending) {
    events_.erase(it);
    it = events_.end();
  }
  if (it == events_.end()) {
    Tracked t;
    t.state.pod = incident.pod;
    t.state.reason = incident.reason;
    t.state.name = event_name(incident.pod.name, wall);
    t.state.first_seen = wall;
    it = events_.emplace(key, std::move(t)).first;
  }
  Tracked& t = it->second;
  t.state.message = incident.message;
  t.state.last_seen = wall;
  ++t.state.count;
  t.seen = now;
  t.pending = true;
  std::vector<EventWrite> out;
  if (slot(incident.pod.uid, now) <= now) out.push_back(write_of(t, now));
  evict(now);
  return out;
}

std::vector<EventWrite> EventAggregator::flush(Clock::time_point now) {
  std::vector<Tracked*> due;
  for (auto& [key, t] : events_)
    if (t.pending) due.push_back(&t);
  // Oldest first, so a pod's budget goes to what has waited longest.
  std::sort(due.begin(), due.end(), [](const Tracked* a, const Tracked* b) { return a->seen < b->seen; });
  std::vector<EventWrite> out;
  for (Tracked* t : due)
    if (slot(t->state.pod.uid, now) <= now) out.push_back(write_of(*t, now));
  return out;
}

std::optional<Clock::time_point> EventAggregator::next_flush() const {
  std::optional<Clock::time_point> next;
  for (const auto& [key, t] : events_) {
    if (!t.pending) continue;
    Clock::time_point at = t.seen;
    if (auto w = writes_.find(t.state.pod.uid);
        w != writes_.end() && w->second.size() >= options_.writes_per_minute)
      at = std::max(at, w->second[w->second.size() - options_.writes_per_minute] + kBudgetPeriod);
    next = next ? std::min(*next, at) : at;
  }
  return next;
}

void EventAggregator::evict(Clock::time_point now) {
  // Pods that wrote nothing in the last minute have their whole budget: forget them.
  std::erase_if(writes_, [&](const auto& kv) { return kv.second.empty() || now - kv.second.back() >= kBudgetPeriod; });
  while (events_.size() > options_.max_events) {
    auto oldest = std::min_element(events_.begin(), events_.end(),
                                   [](const auto& a, const auto& b) { return a.second.seen < b.second.seen; });
    events_.erase(oldest);
  }
}

}  // namespace gdw::kube
