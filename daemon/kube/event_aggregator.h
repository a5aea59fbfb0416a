// Decides which API writes incidents cost, the way kubelet's event recorder aggregates:
// the same (pod, reason, key) within `window` of its last occurrence updates one event
// (count, lastTimestamp, message: a PATCH) instead of creating another (a POST).
//
// Budget: a pod costs at most `writes_per_minute` API writes in any 60 s. An incident
// beyond it is not lost: its event's count grows here and one PATCH carries the total
// when the pod's budget allows again (flush(), at next_flush()). Pure: times are arguments.
#pragma once

#include <chrono>
#include <cstdint>
#include <deque>
#include <map>
#include <optional>
#include <string>
#include <tuple>
#include <vector>

#include "core/clock.h"
#include "kube/event_model.h"

namespace gdw::kube {

struct EventWrite {
  enum class Verb { kCreate, kPatch } verb = Verb::kCreate;
  std::string path;         // POST: .../events; PATCH: .../events/<name>
  std::string create_path;  // where a PATCH whose event is gone (expired, never created) POSTs
  std::string body;         // the verb's body
  std::string create_body;  // the whole event as it stands, for that fallback
};

struct AggregatorOptions {
  std::uint32_t writes_per_minute = 4;
  // An event is updated while its incident recurs within this; after, a new one starts
  // (the API server's default event TTL is 1 h).
  std::chrono::minutes window{10};
  std::size_t max_events = 1024;  // events remembered; the least recently seen go first
  ReportingSource source;
};

class EventAggregator {
 public:
  explicit EventAggregator(AggregatorOptions options) : options_(std::move(options)) {}

  // The incident's writes due now: none when the pod's budget is spent (flush() sends
  // the total later), else one POST or PATCH. Invalid pod references are refused
  // (`invalid` set) and cost nothing.
  std::vector<EventWrite> record(const Incident& incident, Clock::time_point now, WallClock::time_point wall,
                                 bool* invalid = nullptr);
  // Writes that waited for their pod's budget and may go now.
  std::vector<EventWrite> flush(Clock::time_point now);
  // When flush() next has something to send; nullopt while nothing waits.
  std::optional<Clock::time_point> next_flush() const;

  std::size_t events() const { return events_.size(); }

 private:
  using Key = std::tuple<std::string, std::string, std::string>;  // pod UID, reason, incident key
  struct Tracked {
    EventState state;
    bool created = false;  // a POST was handed out
    bool pending = false;  // changed since the last write
    Clock::time_point seen;
  };
  // The earliest moment the pod may write again (now when within budget).
  Clock::time_point slot(const std::string& pod_uid, Clock::time_point now);
  EventWrite write_of(Tracked& t, Clock::time_point now);
  void evict(Clock::time_point now);

  AggregatorOptions options_;
  std::map<Key, Tracked> events_;
  std::map<std::string, std::deque<Clock::time_point>> writes_;  // by pod UID, the last minute's
};

}  // namespace gdw::kube
