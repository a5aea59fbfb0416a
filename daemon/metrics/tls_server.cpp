#include "metrics/tls_server.h"

#include <netdb.h>
#include <openssl/err.h>
#include <openssl/ssl.h>
#include <poll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cctype>
#include <cerrno>
#include <csignal>
#include <cstring>

#include "core/clock.h"
#include "metrics/tls_context.h"

namespace gdw {
namespace {

constexpr std::size_t kMaxHead = 16384;

std::string_view trim(std::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t')) s.remove_prefix(1);
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t')) s.remove_suffix(1);
  return s;
}

bool iequals(std::string_view a, std::string_view b) {
  if (a.size() != b.size()) return false;
  for (std::size_t i = 0; i < a.size(); ++i)
    if (std::tolower(static_cast<unsigned char>(a[i])) != std::tolower(static_cast<unsigned char>(b[i]))) return false;
  return true;
}

const char* reason_phrase(int status) {
  switch (status) {
    case 200: return "OK";
    case 400: return "Bad Request";
    case 401: return "Unauthorized";
    case 404: return "Not Found";
    case 405: return "Method Not Allowed";
    case 500: return "Internal Server Error";
    case 503: return "Service Unavailable";
    default: return "Status";
  }
}

// A listening TCP socket for host:port ("[v6]:port" too).
Result<int> listen_on(const std::string& listen) {
  const auto colon = listen.rfind(':');
  if (colon == std::string::npos) return Error{"cannot serve HTTPS on " + listen + ": not host:port"};
  std::string host = listen.substr(0, colon);
  const std::string port = listen.substr(colon + 1);
  if (host.size() >= 2 && host.front() == '[' && host.back() == ']') host = host.substr(1, host.size() - 2);
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_PASSIVE | AI_NUMERICSERV;
  addrinfo* found = nullptr;
  if (int rc = ::getaddrinfo(host.empty() ? nullptr : host.c_str(), port.c_str(), &hints, &found); rc != 0)
    return Error{"cannot serve HTTPS on " + listen + ": " + ::gai_strerror(rc)};
  std::string problem = "no address";
  int fd = -1;
  for (addrinfo* a = found; a && fd < 0; a = a->ai_next) {
    fd = ::socket(a->ai_family, a->ai_socktype | SOCK_CLOEXEC, a->ai_protocol);
    if (fd < 0) continue;
    int one = 1;
    ::setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    if (::bind(fd, a->ai_addr, a->ai_addrlen) != 0 || ::listen(fd, 64) != 0) {
      problem = std::strerror(errno);
      ::close(fd);
      fd = -1;
    }
  }
  ::freeaddrinfo(found);
  if (fd < 0) return Error{"cannot serve HTTPS on " + listen + ": " + problem};
  return fd;
}

// Waits until the TLS call that returned `rc` can go on, or the deadline passes.
bool wait_for(SSL* ssl, int fd, int rc, Clock::time_point deadline) {
  const int e = SSL_get_error(ssl, rc);
  short events = e == SSL_ERROR_WANT_READ ? POLLIN : e == SSL_ERROR_WANT_WRITE ? POLLOUT : 0;
  if (!events) return false;
  const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now()).count();
  if (left <= 0) return false;
  pollfd p{fd, events, 0};
  return ::poll(&p, 1, static_cast<int>(left)) > 0;
}

}  // namespace

std::optional<HttpRequestHead> parse_request_head(std::string_view head) {
  const auto line_end = head.find("\r\n");
  if (line_end == std::string_view::npos) return std::nullopt;
  const std::string_view line = head.substr(0, line_end);
  const auto sp1 = line.find(' ');
  const auto sp2 = line.rfind(' ');
  if (sp1 == std::string_view::npos || sp2 == sp1) return std::nullopt;
  const std::string_view version = line.substr(sp2 + 1);
  if (version != "HTTP/1.1" && version != "HTTP/1.0") return std::nullopt;
  HttpRequestHead r;
  r.method = std::string(line.substr(0, sp1));
  std::string_view target = line.substr(sp1 + 1, sp2 - sp1 - 1);
  if (r.method.empty() || target.empty() || target.front() != '/') return std::nullopt;
  target = target.substr(0, target.find('?'));
  r.path = std::string(target);
  for (std::size_t at = line_end + 2; at < head.size();) {
    const auto end = head.find("\r\n", at);
    const std::string_view field = head.substr(at, end == std::string_view::npos ? std::string_view::npos : end - at);
    if (field.empty()) break;
    const auto colon = field.find(':');
    if (colon == std::string_view::npos) return std::nullopt;
    if (iequals(field.substr(0, colon), "Authorization")) r.authorization = std::string(trim(field.substr(colon + 1)));
    if (end == std::string_view::npos) break;
    at = end + 2;
  }
  return r;
}

std::string serialize_response(const HttpResponse& r, bool head) {
  std::string out = "HTTP/1.1 " + std::to_string(r.status) + " " + reason_phrase(r.status) + "\r\n";
  out += "Content-Type: " + r.content_type + "\r\n";
  out += "Content-Length: " + std::to_string(r.body.size()) + "\r\n";
  out += "Cache-Control: no-store\r\nConnection: close\r\n";
  for (const auto& [name, value] : r.headers) out += name + ": " + value + "\r\n";
  out += "\r\n";
  if (!head) out += r.body;
  return out;
}

Result<std::unique_ptr<TlsServer>> TlsServer::start(const std::string& listen, std::shared_ptr<const TlsContext> tls,
                                                    Answer answer, int threads, std::chrono::milliseconds timeout) {
  auto fd = listen_on(listen);
  if (!fd) return fd.error();
  // A client gone mid-answer must not kill the process (the daemon ignores it already).
  ::signal(SIGPIPE, SIG_IGN);
  std::unique_ptr<TlsServer> server(new TlsServer());
  server->listen_fd_ = *fd;
  server->stop_fd_ = ::eventfd(0, EFD_CLOEXEC);
  server->tls_ = std::move(tls);
  server->answer_ = std::move(answer);
  server->timeout_ = timeout;
  server->queue_limit_ = static_cast<std::size_t>(threads) * 4;
  for (int i = 0; i < threads; ++i) server->workers_.emplace_back([s = server.get()] { s->work(); });
  server->acceptor_ = std::thread([s = server.get()] { s->accept_loop(); });
  return server;
}

TlsServer::~TlsServer() {
  const std::uint64_t one = 1;
  (void)!::write(stop_fd_, &one, sizeof one);
  if (acceptor_.joinable()) acceptor_.join();
  {
    std::lock_guard lock(mutex_);
    stopping_ = true;
  }
  ready_.notify_all();
  for (auto& w : workers_) w.join();
  for (int fd : queue_) ::close(fd);
  ::close(listen_fd_);
  ::close(stop_fd_);
}

void TlsServer::accept_loop() {
  for (;;) {
    pollfd fds[2] = {{listen_fd_, POLLIN, 0}, {stop_fd_, POLLIN, 0}};
    if (::poll(fds, 2, -1) < 0) {
      if (errno == EINTR) continue;
      return;
    }
    if (fds[1].revents) return;
    const int fd = ::accept4(listen_fd_, nullptr, nullptr, SOCK_CLOEXEC | SOCK_NONBLOCK);
    if (fd < 0) continue;  // EMFILE, a client gone: the next poll tells
    std::lock_guard lock(mutex_);
    if (queue_.size() >= queue_limit_) {
      ::close(fd);
      continue;
    }
    queue_.push_back(fd);
    ready_.notify_one();
  }
}

void TlsServer::work() {
  for (;;) {
    int fd = -1;
    {
      std::unique_lock lock(mutex_);
      ready_.wait(lock, [this] { return stopping_ || !queue_.empty(); });
      if (stopping_) return;
      fd = queue_.front();
      queue_.pop_front();
    }
    serve(fd);
    ::close(fd);
  }
}

void TlsServer::serve(int fd) const {
  const auto deadline = Clock::now() + timeout_;
  std::unique_ptr<SSL, decltype(&SSL_free)> ssl(SSL_new(tls_->get()), &SSL_free);
  if (!ssl || SSL_set_fd(ssl.get(), fd) != 1) return;
  for (int rc; (rc = SSL_accept(ssl.get())) != 1;)
    if (!wait_for(ssl.get(), fd, rc, deadline)) {
      ERR_clear_error();  // a failed handshake (no or bad client certificate) ends here
      return;
    }
  std::string head;
  char buf[4096];
  while (head.find("\r\n\r\n") == std::string::npos) {
    if (head.size() > kMaxHead) return;
    const int n = SSL_read(ssl.get(), buf, sizeof buf);
    if (n > 0) {
      head.append(buf, static_cast<std::size_t>(n));
    } else if (!wait_for(ssl.get(), fd, n, deadline)) {
      ERR_clear_error();
      return;
    }
  }
  const auto request = parse_request_head(head);
  const HttpResponse response =
      request ? answer_(*request) : HttpResponse{400, "text/plain; charset=utf-8", "bad request\n", {}};
  const std::string out = serialize_response(response, request && request->method == "HEAD");
  for (std::size_t sent = 0; sent < out.size();) {
    const int n = SSL_write(ssl.get(), out.data() + sent, static_cast<int>(out.size() - sent));
    if (n > 0) {
      sent += static_cast<std::size_t>(n);
    } else if (!wait_for(ssl.get(), fd, n, deadline)) {
      ERR_clear_error();
      return;
    }
  }
  SSL_shutdown(ssl.get());  // our close_notify; not waiting for the client's
  ERR_clear_error();
}

}  // namespace gdw
