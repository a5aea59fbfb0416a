// Kubernetes Events from the daemon's event loop: incidents go through the aggregator
// (kubelet-style counts, a per-pod write budget) to the sender's worker thread. Nothing
// here waits on the network: a write that finds the queue full, the API server down or the
// credentials missing is dropped and counted (gpu_devwatch_events_dropped_total{reason}).
#pragma once

#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "core/config.h"
#include "kube/event_aggregator.h"
#include "kube/event_model.h"
#include "kube/event_sender.h"
#include "metrics/daemon_metrics.h"
#include "metrics/event_metrics.h"
#include "watch/event_loop.h"

namespace gdw::kube {

// Whether events are on under `config` and the process environment, and where they go;
// nullopt with `why` set when off.
std::optional<ApiEndpoint> events_endpoint(const Config& config, std::string& why);

class EventReporter {
 public:
  // nullptr when events are off (logged once, with the reason).
  static std::unique_ptr<EventReporter> create(const Config& config, EventLoop& loop, Metrics& metrics);
  ~EventReporter();

  void report(Cause cause, const IncidentFacts& facts);

 private:
  EventReporter(const Config& config, ApiEndpoint endpoint, EventLoop& loop, Metrics& metrics);
  Status attach(EventLoop& loop);
  void send(std::vector<EventWrite> writes);
  void schedule_flush();
  void on_outcome(SendOutcome outcome, const std::string& detail);  // worker thread
  void log_outcomes();                                              // loop thread

  EventMetrics metrics_;
  DaemonMetrics loop_metrics_;
  EventAggregator aggregator_;
  std::string server_;
  gdw::EventSource flush_timer_;
  gdw::EventSource wake_source_;
  int wake_fd_ = -1;
  // Outcome changes the worker saw, logged from the loop (one line per change, not per write).
  std::mutex mu_;
  SendOutcome last_outcome_ = SendOutcome::kSent;
  std::vector<std::pair<SendOutcome, std::string>> changes_;
  std::unique_ptr<EventSender> sender_;  // last: its worker stops before the rest goes
};

}  // namespace gdw::kube
