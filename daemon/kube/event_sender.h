// Sends event writes to the API server from one worker thread (libcurl, TLS verified against
// the CA file) so that the event loop never waits on the network: the loop only appends
// to a bounded queue, and a full queue drops the write (counted by the caller).
#pragma once

#include <atomic>
#include <condition_variable>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>

#include "kube/api_endpoint.h"
#include "kube/event_aggregator.h"

namespace gdw::kube {

enum class SendOutcome {
  kSent,
  kUnreachable,    // connection, TLS or timeout: nothing reached the API server
  kRejected,       // the API server answered with an error status
  kNoCredentials,  // the token file is missing or unreadable
};
// The gpu_devwatch_events_dropped_total reason of a failed outcome.
const char* drop_reason(SendOutcome outcome);

class EventSender {
 public:
  // Called on the worker thread after each write; `detail` says why a write failed (curl's
  // error or the API server's status), never the token.
  using OnOutcome = std::function<void(SendOutcome, const std::string& detail)>;

  struct Options {
    std::size_t queue_capacity = 256;
    std::chrono::milliseconds connect_timeout{2000};
    std::chrono::milliseconds request_timeout{5000};
  };
  EventSender(ApiEndpoint endpoint, Options options, OnOutcome on_outcome);
  // Aborts the request in flight and joins the worker.
  ~EventSender();
  EventSender(const EventSender&) = delete;
  EventSender& operator=(const EventSender&) = delete;

  // False when the queue is full: the write is dropped.
  bool enqueue(EventWrite write);

 private:
  void run();
  SendOutcome send(const EventWrite& w, std::string& detail);

  ApiEndpoint endpoint_;
  Options options_;
  OnOutcome on_outcome_;
  TokenFile token_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<EventWrite> queue_;
  std::atomic<bool> stop_{false};
  std::thread worker_;
};

}  // namespace gdw::kube
