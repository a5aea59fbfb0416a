// Sends the daemon's API writes from one worker thread (kube/api_transport.h: libcurl, TLS
// verified against the CA file) so that the event loop never waits on the network: the
// loop only appends to a bounded queue, and a full queue refuses the write (counted by the
// caller). Two lanes: status PATCHes (node conditions, the pod readiness gate: few, and
// each retried by its owner) go before Event writes (dropped when they fail). An answer
// with Retry-After (429 Too Many Requests, 503) holds every request after it until then.
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
#include "kube/api_transport.h"
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

// A strategic-merge PATCH of a status subresource (node conditions, a pod's condition), or
// (`read`) a GET of the node whose conditions they are.
struct StatusWrite {
  std::string path;  // /api/v1/nodes/<node>/status, /api/v1/namespaces/<ns>/pods/<pod>/status
  std::string body;
  // Called on the worker thread with the outcome, the HTTP status (0: none) and why a
  // write failed (never the token); a read that succeeded: the answer's body.
  std::function<void(SendOutcome, long http_status, const std::string& detail)> done;
  bool read = false;
};

class EventSender {
 public:
  // Called on the worker thread after each event write; `detail` says why a write failed
  // (curl's error or the API server's status), never the token.
  using OnOutcome = std::function<void(SendOutcome, const std::string& detail)>;

  struct Options {
    std::size_t queue_capacity = 256;  // event writes waiting
    std::size_t status_capacity = 64;  // status writes waiting
    std::chrono::milliseconds connect_timeout{2000};
    std::chrono::milliseconds request_timeout{5000};
    std::size_t max_read_bytes = 8u << 20;  // a Node object (its images list makes it large)
  };
  EventSender(ApiEndpoint endpoint, Options options, OnOutcome on_outcome);
  // Aborts the request in flight and joins the worker.
  ~EventSender();
  EventSender(const EventSender&) = delete;
  EventSender& operator=(const EventSender&) = delete;

  // False when the queue is full: the write is dropped.
  bool enqueue(EventWrite write);
  // False when the status lane is full: `done` is not called.
  bool enqueue_status(StatusWrite write);

 private:
  struct Job {
    bool status = false;
    EventWrite event;
    StatusWrite patch;
  };
  void run();
  SendOutcome send(const EventWrite& w, std::string& detail);
  SendOutcome send_status(const StatusWrite& w, long& http_status, std::string& detail);
  ApiResponse perform(const char* method, const std::string& path, const std::string& body, const char* type,
                      const std::string& token);
  static SendOutcome judge(const ApiResponse& r, const char* method, const std::string& path, std::string& detail);
  void hold_for(const ApiResponse& r);
  // Waits out a hold; false when stopping.
  bool wait_hold();

  ApiEndpoint endpoint_;
  Options options_;
  OnOutcome on_outcome_;
  TokenFile token_;
  ApiTransport transport_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<EventWrite> queue_;
  std::deque<StatusWrite> status_queue_;
  bool stop_ = false;
  std::chrono::steady_clock::time_point hold_until_{};  // the worker's own
  std::thread worker_;
};

}  // namespace gdw::kube
