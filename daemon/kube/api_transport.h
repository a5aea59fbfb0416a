// One HTTPS exchange with the API server at a time, for one thread: libcurl with the peer
// and host verified against the CA file, the ServiceAccount's bearer token, deadlines, a
// bound on what is kept of an answer, and a stop that ends the exchange in flight at once
// (curl_multi_wakeup), so that the loop joining a worker at reload or exit never waits on
// the network. The events' and status writes' worker (event_sender.h) and the pod watch
// (pod_watcher.h) each own one. Every request carries the User-Agent
// "gpu-devwatch/<version> (<node>)"; an answer's Retry-After is kept for the caller.
#pragma once

#include <atomic>
#include <chrono>
#include <cstddef>
#include <functional>
#include <optional>
#include <string>
#include <string_view>

#include "kube/api_endpoint.h"

typedef void CURL;
typedef void CURLM;

namespace gdw::kube {

struct ApiRequest {
  const char* method = "GET";
  std::string path;  // after the server: /api/v1/...
  const std::string* body = nullptr;
  const char* content_type = "application/json";
  std::chrono::milliseconds connect_timeout{2000};
  // The whole exchange; 0: none (a watch, bounded by `idle_timeout` instead).
  std::chrono::milliseconds timeout{5000};
  // Aborted when fewer than one byte a second arrived for this long; 0: off.
  std::chrono::seconds idle_timeout{0};
  // Bytes of an answer kept in ApiResponse::body; beyond: the exchange is aborted and
  // `truncated` set (a 2xx answer only; an error's text is cut, not aborted).
  std::size_t max_body = 512;
  // Streaming: a 2xx answer's body goes here, chunk by chunk, instead of into `body`;
  // false aborts the exchange.
  std::function<bool(std::string_view)> on_body;
};

struct ApiResponse {
  long status = 0;    // 0: no HTTP answer (see error)
  std::string error;  // curl's text, never the token
  std::string body;
  bool truncated = false;  // a 2xx answer exceeded max_body
  bool stopped = false;    // ended by stop()
  // The server's Retry-After (delta-seconds), on any answer that carried one (429, 503).
  std::optional<std::chrono::seconds> retry_after;
  bool ok() const { return status >= 200 && status < 300 && !truncated && error.empty(); }
};

class ApiTransport {
 public:
  explicit ApiTransport(ApiEndpoint endpoint);
  ~ApiTransport();
  ApiTransport(const ApiTransport&) = delete;
  ApiTransport& operator=(const ApiTransport&) = delete;

  // On the owning thread.
  ApiResponse perform(const ApiRequest& request, const std::string& token);
  // Any thread: the exchange in flight ends now, and every later one at once.
  void stop();
  bool stopping() const { return stop_.load(); }
  const ApiEndpoint& endpoint() const { return endpoint_; }

 private:
  ApiEndpoint endpoint_;
  std::string user_agent_;
  CURL* easy_ = nullptr;
  CURLM* multi_ = nullptr;
  std::atomic<bool> stop_{false};
};

}  // namespace gdw::kube
