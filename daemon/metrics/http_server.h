// The daemon's HTTP endpoint (/metrics, /healthz) on civetweb.
//
// Anyone who can reach the node's port can open connections: a client that sends half a
// request, drips bytes or never reads must not keep the endpoint from answering the
// scraper and the liveness probe. So: a pool of workers larger than a handful of such
// clients, a bound on the time one request may take (read and write), and no keep-alive
// (an idle kept-alive connection would hold a worker too).
//
// Plain HTTP is served by civetweb; HTTPS (a web config's tls_server_config) by TlsServer
// (tls_server.h says why not civetweb). Both answer through answer_request(), so routing
// and basic authentication are the same either way.
#pragma once

#include <chrono>
#include <functional>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "core/result.h"

struct mg_context;
struct mg_connection;

namespace gdw {

class BasicAuth;
class TlsContext;
class TlsServer;

struct HttpResponse {
  int status = 200;
  std::string content_type = "text/plain; charset=utf-8";
  std::string body;
  std::vector<std::pair<std::string, std::string>> headers;  // beyond the standard ones
};

// Called on a server thread, concurrently: must only read thread-safe state.
using HttpHandler = std::function<HttpResponse()>;

struct HttpServerOptions {
  int threads = 16;
  // Whole request (headers read, answer written); a slower client is cut off.
  std::chrono::milliseconds request_timeout{3000};
  std::shared_ptr<const TlsContext> tls;         // null: plain HTTP
  std::shared_ptr<const BasicAuth> basic_auth;   // null: no authentication
  std::set<std::string> unauthenticated_paths;   // answered without credentials
};

using HttpRoutes = std::map<std::string, HttpHandler>;

// The answer to one request: 405 unless GET/HEAD, 401 (with a Basic challenge) without
// valid credentials when basic_auth is set, 404 for unknown paths, else the route's.
HttpResponse answer_request(const HttpRoutes& routes, const HttpServerOptions& options, std::string_view method,
                            std::string_view path, std::string_view authorization);

class HttpServer {
 public:
  // Serves GET/HEAD of each exact path in `routes` at `listen` (host:port, [v6]:port).
  static Result<std::unique_ptr<HttpServer>> start(const std::string& listen, std::map<std::string, HttpHandler> routes,
                                                   const HttpServerOptions& options = {});
  ~HttpServer();  // stops the threads
  HttpServer(const HttpServer&) = delete;
  HttpServer& operator=(const HttpServer&) = delete;

 private:
  HttpServer() = default;
  static int on_request(mg_connection* conn, void* self);
  mg_context* ctx_ = nullptr;
  std::unique_ptr<TlsServer> tls_server_;
  HttpRoutes routes_;
  HttpServerOptions options_;
};

}  // namespace gdw
