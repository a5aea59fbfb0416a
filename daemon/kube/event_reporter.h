// Kubernetes Events from the daemon's event loop: incidents go through the aggregator
// (kubelet-style counts, a per-pod write budget) to the sender's worker thread (shared with
// the status writes: kube_reporting.h owns it). Nothing
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
  // Writes through `sender` (which must outlive it, and whose event outcomes must reach
  // on_outcome()); nullptr when the loop refuses its sources (logged).
  static std::unique_ptr<EventReporter> create(const Config& config, const ApiEndpoint& endpoint, EventLoop& loop,
                                               Metrics& metrics, EventSender& sender);
  ~EventReporter();

  void report(Cause cause, const IncidentFacts& facts);
  // The sender's worker thread, after each event write.
  void on_outcome(SendOutcome outcome, const std::string& detail);

 private:
  EventReporter(const Config& config, const ApiEndpoint& endpoint, Metrics& metrics, EventSender& sender);
  Status attach(EventLoop& loop);
  void send(std::vector<EventWrite> writes);
  void schedule_flush();
  void log_outcomes();  // loop thread

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
  EventSender& sender_;
};

}  // namespace gdw::kube
