#include "kube/event_sender.h"

#include <curl/curl.h>

#include <mutex>

namespace gdw::kube {
namespace {

// A Status object's text says why (RBAC: "events is forbidden: User ..."); kept short.
constexpr std::size_t kMaxResponseBytes = 512;

struct CurlGlobal {
  CurlGlobal() { curl_global_init(CURL_GLOBAL_DEFAULT); }
};

std::size_t keep_response(char* data, std::size_t size, std::size_t n, void* user) {
  auto* out = static_cast<std::string*>(user);
  const std::size_t bytes = size * n;
  if (out->size() < kMaxResponseBytes) out->append(data, std::min(bytes, kMaxResponseBytes - out->size()));
  return bytes;
}

int abort_when_stopping(void* user, curl_off_t, curl_off_t, curl_off_t, curl_off_t) {
  return static_cast<std::atomic<bool>*>(user)->load() ? 1 : 0;
}

struct Response {
  long status = 0;  // 0: no HTTP answer (see error)
  std::string error;
  std::string body;
};

struct Request {
  const char* method;
  std::string url;
  const std::string* body;
  const char* content_type;
};

class Curl {
 public:
  Curl() : handle_(curl_easy_init()) {}
  ~Curl() {
    if (handle_) curl_easy_cleanup(handle_);
  }
  Curl(const Curl&) = delete;
  Curl& operator=(const Curl&) = delete;

  Response perform(const Request& req, const ApiEndpoint& ep, const std::string& token,
                   const EventSender::Options& o, std::atomic<bool>* stop) {
    Response r;
    if (!handle_) {
      r.error = "curl_easy_init failed";
      return r;
    }
    CURL* h = handle_;
    curl_easy_reset(h);  // keeps the connection cache: one TLS handshake for a burst
    char errbuf[CURL_ERROR_SIZE] = "";
    const std::string auth = "Authorization: Bearer " + token;
    const std::string type = std::string("Content-Type: ") + req.content_type;
    curl_slist* headers = nullptr;
    headers = curl_slist_append(headers, auth.c_str());
    headers = curl_slist_append(headers, type.c_str());
    headers = curl_slist_append(headers, "Accept: application/json");
    curl_easy_setopt(h, CURLOPT_URL, req.url.c_str());
    curl_easy_setopt(h, CURLOPT_PROTOCOLS_STR, "https");
    curl_easy_setopt(h, CURLOPT_CUSTOMREQUEST, req.method);
    curl_easy_setopt(h, CURLOPT_POSTFIELDS, req.body->c_str());
    curl_easy_setopt(h, CURLOPT_POSTFIELDSIZE, static_cast<long>(req.body->size()));
    curl_easy_setopt(h, CURLOPT_HTTPHEADER, headers);
    curl_easy_setopt(h, CURLOPT_CAINFO, ep.ca_file.c_str());
    curl_easy_setopt(h, CURLOPT_SSL_VERIFYPEER, 1L);
    curl_easy_setopt(h, CURLOPT_SSL_VERIFYHOST, 2L);
    curl_easy_setopt(h, CURLOPT_CONNECTTIMEOUT_MS, static_cast<long>(o.connect_timeout.count()));
    curl_easy_setopt(h, CURLOPT_TIMEOUT_MS, static_cast<long>(o.request_timeout.count()));
    curl_easy_setopt(h, CURLOPT_NOSIGNAL, 1L);
    curl_easy_setopt(h, CURLOPT_ERRORBUFFER, errbuf);
    curl_easy_setopt(h, CURLOPT_WRITEFUNCTION, keep_response);
    curl_easy_setopt(h, CURLOPT_WRITEDATA, &r.body);
    curl_easy_setopt(h, CURLOPT_NOPROGRESS, 0L);
    curl_easy_setopt(h, CURLOPT_XFERINFOFUNCTION, abort_when_stopping);
    curl_easy_setopt(h, CURLOPT_XFERINFODATA, stop);
    CURLcode rc = curl_easy_perform(h);
    curl_slist_free_all(headers);
    if (rc != CURLE_OK) {
      r.error = errbuf[0] ? errbuf : curl_easy_strerror(rc);
      return r;
    }
    curl_easy_getinfo(h, CURLINFO_RESPONSE_CODE, &r.status);
    return r;
  }

 private:
  CURL* handle_;
};

thread_local std::unique_ptr<Curl> t_curl;

}  // namespace

const char* drop_reason(SendOutcome outcome) {
  switch (outcome) {
    case SendOutcome::kSent: return "";
    case SendOutcome::kUnreachable: return "unreachable";
    case SendOutcome::kRejected: return "rejected";
    case SendOutcome::kNoCredentials: return "credentials";
  }
  return "";
}

EventSender::EventSender(ApiEndpoint endpoint, Options options, OnOutcome on_outcome)
    : endpoint_(std::move(endpoint)),
      options_(options),
      on_outcome_(std::move(on_outcome)),
      token_(endpoint_.token_file) {
  // curl_global_init is not thread-safe: done here, on the caller's thread, once.
  static CurlGlobal global;
  worker_ = std::thread([this] { run(); });
}

EventSender::~EventSender() {
  {
    std::lock_guard lock(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  if (worker_.joinable()) worker_.join();
}

bool EventSender::enqueue(EventWrite write) {
  {
    std::lock_guard lock(mu_);
    if (queue_.size() >= options_.queue_capacity) return false;
    queue_.push_back(std::move(write));
  }
  cv_.notify_one();
  return true;
}

void EventSender::run() {
  t_curl = std::make_unique<Curl>();
  for (;;) {
    EventWrite w;
    {
      std::unique_lock lock(mu_);
      cv_.wait(lock, [&] { return stop_ || !queue_.empty(); });
      if (stop_) break;
      w = std::move(queue_.front());
      queue_.pop_front();
    }
    std::string detail;
    SendOutcome outcome = send(w, detail);
    on_outcome_(outcome, detail);
  }
  t_curl.reset();
}

SendOutcome EventSender::send(const EventWrite& w, std::string& detail) {
  auto token = token_.get();
  if (!token) {
    detail = token.error().message;
    return SendOutcome::kNoCredentials;
  }
  const bool patch = w.verb == EventWrite::Verb::kPatch;
  Request req{patch ? "PATCH" : "POST", endpoint_.server + w.path, &w.body,
              patch ? "application/strategic-merge-patch+json" : "application/json"};
  Response r = t_curl->perform(req, endpoint_, *token, options_, &stop_);
  // The event expired (1 h TTL) or its POST was dropped: create it as it stands now.
  if (patch && r.status == 404) {
    req = Request{"POST", endpoint_.server + w.create_path, &w.create_body, "application/json"};
    r = t_curl->perform(req, endpoint_, *token, options_, &stop_);
  }
  if (r.status >= 200 && r.status < 300) return SendOutcome::kSent;
  if (r.status == 0) {
    detail = r.error;
    return SendOutcome::kUnreachable;
  }
  detail = std::string(req.method) + " " + req.url + ": HTTP " + std::to_string(r.status) + " " + r.body;
  return SendOutcome::kRejected;
}

}  // namespace gdw::kube
