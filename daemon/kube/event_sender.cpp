#include "kube/event_sender.h"

namespace gdw::kube {
namespace {

constexpr const char* kJson = "application/json";
constexpr const char* kMergePatch = "application/strategic-merge-patch+json";

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
      token_(endpoint_.token_file),
      transport_(endpoint_) {
  worker_ = std::thread([this] { run(); });
}

EventSender::~EventSender() {
  {
    std::lock_guard lock(mu_);
    stop_ = true;
  }
  transport_.stop();  // the exchange in flight ends now, not at its timeout
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

bool EventSender::enqueue_status(StatusWrite write) {
  {
    std::lock_guard lock(mu_);
    if (status_queue_.size() >= options_.status_capacity) return false;
    status_queue_.push_back(std::move(write));
  }
  cv_.notify_one();
  return true;
}

void EventSender::run() {
  for (;;) {
    Job job;
    {
      std::unique_lock lock(mu_);
      cv_.wait(lock, [&] { return stop_ || !queue_.empty() || !status_queue_.empty(); });
      if (stop_) break;
      if (!status_queue_.empty()) {
        job.status = true;
        job.patch = std::move(status_queue_.front());
        status_queue_.pop_front();
      } else {
        job.event = std::move(queue_.front());
        queue_.pop_front();
      }
    }
    if (!wait_hold()) break;
    std::string detail;
    if (job.status) {
      long http_status = 0;
      SendOutcome outcome = send_status(job.patch, http_status, detail);
      if (job.patch.done) job.patch.done(outcome, http_status, detail);
    } else {
      SendOutcome outcome = send(job.event, detail);
      if (on_outcome_) on_outcome_(outcome, detail);
    }
  }
}

bool EventSender::wait_hold() {
  std::unique_lock lock(mu_);
  cv_.wait_until(lock, hold_until_, [&] { return stop_; });
  return !stop_;
}

void EventSender::hold_for(const ApiResponse& r) {
  if (r.retry_after && (r.status == 429 || r.status >= 500))
    hold_until_ = std::chrono::steady_clock::now() + *r.retry_after;
}

ApiResponse EventSender::perform(const char* method, const std::string& path, const std::string& body,
                                 const char* type, const std::string& token) {
  ApiRequest req;
  req.method = method;
  req.path = path;
  req.body = &body;
  req.content_type = type;
  req.connect_timeout = options_.connect_timeout;
  req.timeout = options_.request_timeout;
  // A Status object's text says why (RBAC: "events is forbidden: User ..."); kept short.
  req.max_body = 512;
  ApiResponse r = transport_.perform(req, token);
  hold_for(r);
  return r;
}

SendOutcome EventSender::judge(const ApiResponse& r, const char* method, const std::string& path,
                               std::string& detail) {
  if (r.status >= 200 && r.status < 300) return SendOutcome::kSent;
  if (r.status == 0) {
    detail = r.error;
    return SendOutcome::kUnreachable;
  }
  detail = std::string(method) + " " + path + ": HTTP " + std::to_string(r.status) + " " + r.body;
  return SendOutcome::kRejected;
}

SendOutcome EventSender::send(const EventWrite& w, std::string& detail) {
  auto token = token_.get();
  if (!token) {
    detail = token.error().message;
    return SendOutcome::kNoCredentials;
  }
  const bool patch = w.verb == EventWrite::Verb::kPatch;
  const char* method = patch ? "PATCH" : "POST";
  ApiResponse r = perform(method, w.path, w.body, patch ? kMergePatch : kJson, *token);
  // The event expired (1 h TTL) or its POST was dropped: create it as it stands now.
  if (patch && r.status == 404) {
    method = "POST";
    r = perform(method, w.create_path, w.create_body, kJson, *token);
    return judge(r, method, endpoint_.server + w.create_path, detail);
  }
  return judge(r, method, endpoint_.server + w.path, detail);
}

SendOutcome EventSender::send_status(const StatusWrite& w, long& http_status, std::string& detail) {
  auto token = token_.get();
  if (!token) {
    detail = token.error().message;
    return SendOutcome::kNoCredentials;
  }
  if (w.read) {
    ApiRequest req;
    req.path = w.path;
    req.connect_timeout = options_.connect_timeout;
    req.timeout = options_.request_timeout;
    req.max_body = options_.max_read_bytes;
    ApiResponse r = transport_.perform(req, *token);
    hold_for(r);
    http_status = r.status;
    if (r.truncated) r.status = 0;
    const SendOutcome outcome = judge(r, "GET", endpoint_.server + w.path, detail);
    if (outcome == SendOutcome::kSent) detail = std::move(r.body);
    return outcome;
  }
  ApiResponse r = perform("PATCH", w.path, w.body, kMergePatch, *token);
  http_status = r.status;
  return judge(r, "PATCH", endpoint_.server + w.path, detail);
}

}  // namespace gdw::kube
