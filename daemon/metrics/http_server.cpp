#include "metrics/http_server.h"

#include <civetweb.h>

#include <cstring>
#include <exception>
#include <mutex>
#include <vector>

#include "metrics/basic_auth.h"
#include "metrics/tls_server.h"

namespace gdw {
namespace {

void send(mg_connection* conn, const HttpResponse& r, bool head) {
  mg_response_header_start(conn, r.status);
  mg_response_header_add(conn, "Content-Type", r.content_type.c_str(), -1);
  mg_response_header_add(conn, "Content-Length", std::to_string(r.body.size()).c_str(), -1);
  mg_response_header_add(conn, "Cache-Control", "no-store", -1);
  for (const auto& [name, value] : r.headers) mg_response_header_add(conn, name.c_str(), value.c_str(), -1);
  mg_response_header_send(conn);
  if (!head && !r.body.empty()) mg_write(conn, r.body.data(), r.body.size());
}

// civetweb's messages on stderr would bypass our log; start() returns its startup error.
int on_log_message(const mg_connection*, const char*) { return 1; }

}  // namespace

HttpResponse answer_request(const HttpRoutes& routes, const HttpServerOptions& options, std::string_view method,
                            std::string_view path, std::string_view authorization) {
  constexpr const char* kText = "text/plain; charset=utf-8";
  if (method != "GET" && method != "HEAD") return {405, kText, "only GET and HEAD\n", {}};
  // Checked before routing, so that without credentials every path looks the same.
  if (options.basic_auth && !options.unauthenticated_paths.count(std::string(path)) &&
      !options.basic_auth->allows(authorization))
    return {401, kText, "unauthorized\n", {{"WWW-Authenticate", "Basic realm=\"gpu-devwatch\", charset=\"UTF-8\""}}};
  auto route = routes.find(std::string(path));
  if (route == routes.end()) return {404, kText, "not found\n", {}};
  // Nothing may cross back into C.
  try {
    return route->second();
  } catch (const std::exception& e) {
    return {500, kText, std::string("error: ") + e.what() + "\n", {}};
  } catch (...) {
    return {500, kText, "error\n", {}};
  }
}

int HttpServer::on_request(mg_connection* conn, void*) {
  const mg_request_info* req = mg_get_request_info(conn);
  auto* self = static_cast<HttpServer*>(mg_get_user_data(mg_get_context(conn)));
  const char* authorization = mg_get_header(conn, "Authorization");
  const HttpResponse r = answer_request(self->routes_, self->options_, req->request_method,
                                        req->local_uri ? req->local_uri : "", authorization ? authorization : "");
  send(conn, r, std::strcmp(req->request_method, "HEAD") == 0);
  return r.status;
}

Result<std::unique_ptr<HttpServer>> HttpServer::start(const std::string& listen,
                                                      std::map<std::string, HttpHandler> routes,
                                                      const HttpServerOptions& options) {
  static std::once_flag library;
  std::call_once(library, [] { mg_init_library(0); });
  std::unique_ptr<HttpServer> server(new HttpServer());
  server->routes_ = std::move(routes);
  server->options_ = options;
  if (options.tls) {
    auto tls = TlsServer::start(
        listen, options.tls,
        [s = server.get()](const HttpRequestHead& r) {
          return answer_request(s->routes_, s->options_, r.method, r.path, r.authorization);
        },
        options.threads, options.request_timeout);
    if (!tls) return tls.error();
    server->tls_server_ = std::move(*tls);
    return server;
  }
  const std::string threads = std::to_string(options.threads);
  const std::string timeout = std::to_string(options.request_timeout.count());
  const char* conf[] = {"listening_ports", listen.c_str(),
                        "num_threads", threads.c_str(),
                        "request_timeout_ms", timeout.c_str(),
                        "enable_keep_alive", "no",
                        // Waiting for a client to close after our answer is bounded too.
                        "linger_timeout_ms", timeout.c_str(),
                        "max_request_size", "16384",
                        nullptr};
  mg_callbacks callbacks{};
  callbacks.log_message = on_log_message;
  mg_init_data init{&callbacks, server.get(), conf};
  char text[256] = {};
  unsigned code = 0;
  mg_error_data error{&code, text, sizeof text};
  server->ctx_ = mg_start2(&init, &error);
  if (!server->ctx_) return Error{"cannot serve HTTP on " + listen + ": " + (text[0] ? text : "civetweb failed")};
  // A catch-all: every request is answered by on_request (404 for unknown paths), never by
  // civetweb's file serving.
  mg_set_request_handler(server->ctx_, "/", &HttpServer::on_request, nullptr);
  return server;
}

HttpServer::~HttpServer() {
  tls_server_.reset();
  if (ctx_) mg_stop(ctx_);
}

}  // namespace gdw
