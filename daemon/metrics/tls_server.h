// HTTPS for the metrics endpoint, on OpenSSL directly.
//
// Debian 12's civetweb (1.15) cannot serve TLS: it loads libssl at run time by a symbol
// table written for OpenSSL 1.1, and OpenSSL 3 no longer exports SSL_get_peer_certificate,
// so its worker calls a null pointer on the first TLS connection (the whole daemon dies).
// This server is small because it only has to answer GET/HEAD of a few paths: one request
// per connection (Connection: close), a head of at most 16 KiB and no body, and the whole
// exchange (handshake included) bounded by one deadline, so clients that stall hold a
// worker for at most that long. Connections beyond what the workers and a short queue take
// are closed at once.
#pragma once

#include <chrono>
#include <condition_variable>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include "core/result.h"
#include "metrics/http_server.h"

namespace gdw {

class TlsContext;

struct HttpRequestHead {
  std::string method;
  std::string path;           // without the query
  std::string authorization;  // the Authorization header's value, or ""
};

// Parses a request head (request line and headers, up to the blank line). nullopt when it
// is not a well-formed HTTP/1.x request head.
std::optional<HttpRequestHead> parse_request_head(std::string_view head);

// The bytes of a whole HTTP/1.1 answer (Connection: close); no body for HEAD.
std::string serialize_response(const HttpResponse& r, bool head);

class TlsServer {
 public:
  using Answer = std::function<HttpResponse(const HttpRequestHead&)>;
  static Result<std::unique_ptr<TlsServer>> start(const std::string& listen, std::shared_ptr<const TlsContext> tls,
                                                  Answer answer, int threads, std::chrono::milliseconds timeout);
  ~TlsServer();  // stops accepting; waits for the workers (each done within the timeout)
  TlsServer(const TlsServer&) = delete;
  TlsServer& operator=(const TlsServer&) = delete;

 private:
  TlsServer() = default;
  void accept_loop();
  void work();
  void serve(int fd) const;

  std::shared_ptr<const TlsContext> tls_;
  Answer answer_;
  std::chrono::milliseconds timeout_{3000};
  std::size_t queue_limit_ = 0;
  int listen_fd_ = -1;
  int stop_fd_ = -1;
  std::mutex mutex_;
  std::condition_variable ready_;
  std::deque<int> queue_;
  bool stopping_ = false;
  std::thread acceptor_;
  std::vector<std::thread> workers_;
};

}  // namespace gdw
