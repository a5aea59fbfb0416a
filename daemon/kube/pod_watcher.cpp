#include "kube/pod_watcher.h"

namespace gdw::kube {
namespace {

// A watch that lasted less than this before it ended is retried after a back-off, so that a
// server that ends every watch at once is not asked again in a tight loop.
constexpr auto kShortWatch = std::chrono::seconds(1);

}  // namespace

std::string percent_encode(const std::string& text) {
  static const char* hex = "0123456789ABCDEF";
  std::string out;
  for (unsigned char ch : text) {
    if ((ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') || (ch >= '0' && ch <= '9') || ch == '-' || ch == '.' ||
        ch == '_' || ch == '~') {
      out += static_cast<char>(ch);
    } else {
      out += '%';
      out += hex[ch >> 4];
      out += hex[ch & 15];
    }
  }
  return out;
}

PodWatcher::PodWatcher(ApiEndpoint endpoint, PodWatchOptions options, std::function<void()> changed)
    : options_(std::move(options)),
      changed_(std::move(changed)),
      backoff_(options_.backoff_first, options_.backoff_max, options_.jitter, random_seed()),
      rng_(random_seed()),
      token_(endpoint.token_file),
      transport_(endpoint) {
  thread_ = std::thread([this] { run(); });
}

PodWatcher::~PodWatcher() {
  {
    std::lock_guard lock(mu_);
    stop_ = true;
  }
  transport_.stop();
  cv_.notify_all();
  if (thread_.joinable()) thread_.join();
}

PodWatchView PodWatcher::view() const {
  std::lock_guard lock(mu_);
  return view_;
}

std::string PodWatcher::selector() const { return "fieldSelector=" + percent_encode("spec.nodeName=" + options_.node); }

void PodWatcher::sleep_for(std::chrono::milliseconds d) {
  std::unique_lock lock(mu_);
  cv_.wait_for(lock, d, [&] { return stop_; });
}

void PodWatcher::fail(const std::string& why) {
  {
    std::lock_guard lock(mu_);
    if (view_.problem == why) return;
    view_.problem = why;
    ++view_.generation;
  }
  if (changed_) changed_();
}

void PodWatcher::publish(bool synced_now) {
  {
    std::lock_guard lock(mu_);
    view_.pods.clear();
    for (const auto& [uid, pod] : pods_) view_.pods.push_back(pod);
    if (synced_now) {
      view_.synced = true;
      ++view_.lists;
    }
    view_.problem.clear();
    ++view_.generation;
  }
  dirty_ = false;
  if (changed_) changed_();
}

void PodWatcher::run() {
  bool need_list = true;
  // Jittered, and at least what the server asked for (429, 503 with Retry-After).
  auto back_off = [&] {
    sleep_for(std::chrono::duration_cast<std::chrono::milliseconds>(backoff_.next(retry_after_)));
    retry_after_.reset();
  };
  for (;;) {
    {
      std::lock_guard lock(mu_);
      if (stop_) return;
    }
    if (need_list) {
      if (auto s = list(); !s) {
        if (transport_.stopping()) return;
        fail("listing pods: " + s.error().message);
        back_off();
        continue;
      }
      need_list = false;
    }
    const auto started = std::chrono::steady_clock::now();
    std::string why;
    const WatchEnd end = watch(why);
    if (end == WatchEnd::kStopped) return;
    if (end == WatchEnd::kGone) {
      need_list = true;  // the resourceVersion is compacted away: start from a fresh list
      continue;
    }
    if (end == WatchEnd::kFailed) fail("watching pods: " + why);
    if (end == WatchEnd::kFailed || std::chrono::steady_clock::now() - started < kShortWatch) {
      back_off();
    } else {
      backoff_.reset();
    }
  }
}

Result<std::string> PodWatcher::get(const std::string& path, std::string& body) {
  auto token = token_.get();
  if (!token) return token.error();
  ApiRequest req;
  req.path = path;
  req.timeout = options_.request_timeout;
  req.max_body = options_.max_page_bytes;
  ApiResponse r = transport_.perform(req, *token);
  if (r.stopped) return Error{"stopped"};
  if (r.status == 429 || r.status >= 500) retry_after_ = r.retry_after;
  if (!r.ok()) {
    if (r.status == 0 || r.truncated) return Error{r.error};
    return Error{"GET " + path + ": HTTP " + std::to_string(r.status) + " " + r.body.substr(0, 512)};
  }
  body = std::move(r.body);
  return std::string();
}

Status PodWatcher::list() {
  std::map<std::string, GatedPod> fresh;
  pods_.swap(fresh);  // consider() fills pods_
  std::string cont, rv, body;
  do {
    // From the watch cache: whole, at a resourceVersion the watch can start from. A server
    // that pages anyway is followed (a continue token carries its own resourceVersion).
    std::string path = "/api/v1/pods?" + selector();
    path += cont.empty() ? "&resourceVersion=0" : "&continue=" + percent_encode(cont);
    {
      std::lock_guard lock(mu_);
      ++view_.list_requests;
    }
    if (auto got = get(path, body); !got) {
      pods_.swap(fresh);  // keep what we knew
      return got.error();
    }
    auto page = parse_pod_list(body, options_.max_list_items);
    if (!page) {
      pods_.swap(fresh);
      return page.error();
    }
    if (rv.empty()) rv = page->resource_version;
    for (const auto& pod : page->pods) consider(pod);
    cont = page->continue_token;
  } while (!cont.empty());
  resource_version_ = rv;
  publish(/*synced_now=*/true);
  return {};
}

PodWatcher::WatchEnd PodWatcher::watch(std::string& why) {
  auto token = token_.get();
  if (!token) {
    why = token.error().message;
    return WatchEnd::kFailed;
  }
  {
    std::lock_guard lock(mu_);
    ++view_.watches;
  }
  ApiRequest req;
  const auto base = options_.watch_timeout.count();
  const auto timeout = std::chrono::seconds(base + std::uniform_int_distribution<long>(0, std::max(0L, base - 1))(rng_));
  req.path = "/api/v1/pods?" + selector() + "&watch=true&allowWatchBookmarks=true&resourceVersion=" +
             percent_encode(resource_version_) + "&timeoutSeconds=" + std::to_string(timeout.count());
  req.timeout = std::chrono::duration_cast<std::chrono::milliseconds>(timeout) + std::chrono::seconds(30);
  req.idle_timeout = options_.idle_timeout;
  req.max_body = 4096;  // an error's Status
  bool gone = false;
  connected_ = false;
  line_.clear();
  discarding_ = false;
  req.on_body = [&](std::string_view bytes) { return take_bytes(bytes, gone); };
  ApiResponse r = transport_.perform(req, *token);
  if (dirty_) publish();
  if (r.stopped) return WatchEnd::kStopped;
  if (r.status == 429 || r.status >= 500) retry_after_ = r.retry_after;
  if (gone || r.status == 410) {
    std::lock_guard lock(mu_);
    ++view_.gone;
    return WatchEnd::kGone;
  }
  if (r.status >= 200 && r.status < 300) return WatchEnd::kEnded;  // timeoutSeconds, or the server closed it
  why = r.status ? "HTTP " + std::to_string(r.status) + " " + r.body.substr(0, 512) : r.error;
  return WatchEnd::kFailed;
}

bool PodWatcher::take_bytes(std::string_view bytes, bool& gone) {
  if (!connected_) {
    connected_ = true;  // the watch delivers: whatever failed before works again
    dirty_ = true;
  }
  while (!bytes.empty()) {
    const auto nl = bytes.find('\n');
    const std::string_view part = bytes.substr(0, nl);
    if (!discarding_) {
      if (line_.size() + part.size() > options_.max_event_bytes) {
        discarding_ = true;  // an event larger than any pod the API server stores: not read
        line_.clear();
        std::lock_guard lock(mu_);
        ++view_.skipped;
      } else {
        line_.append(part);
      }
    }
    if (nl == std::string_view::npos) break;
    if (!discarding_ && !line_.empty()) take_line(line_, gone);
    line_.clear();
    discarding_ = false;
    bytes.remove_prefix(nl + 1);
    if (gone) return false;
  }
  if (dirty_) publish();
  return true;
}

void PodWatcher::take_line(std::string_view line, bool& gone) {
  auto event = parse_watch_event(line);
  if (!event) {
    std::lock_guard lock(mu_);
    ++view_.skipped;
    return;
  }
  using Type = WatchEvent::Type;
  if (event->type == Type::kError) {
    gone = event->error_code == 410;
    if (!gone) {
      std::lock_guard lock(mu_);
      ++view_.skipped;
    }
    return;
  }
  if (!event->pod.resource_version.empty()) resource_version_ = event->pod.resource_version;
  if (event->type == Type::kAdded || event->type == Type::kModified) {
    consider(event->pod);
  } else if (event->type == Type::kDeleted) {
    dirty_ |= pods_.erase(event->pod.pod.uid) > 0;
  }
}

void PodWatcher::consider(const PodFacts& pod) {
  if (!gate_applies(pod, options_.node)) {
    dirty_ |= pods_.erase(pod.pod.uid) > 0;
    return;
  }
  auto it = pods_.find(pod.pod.uid);
  if (it == pods_.end() && pods_.size() >= options_.max_pods) {
    std::lock_guard lock(mu_);
    ++view_.skipped;
    return;
  }
  GatedPod gated{pod.pod, pod.gate_status, all_started(pod)};
  if (it != pods_.end() && it->second.pod.name == gated.pod.name &&
      it->second.pod.pod_namespace == gated.pod.pod_namespace && it->second.observed == gated.observed &&
      it->second.started == gated.started)
    return;
  pods_[pod.pod.uid] = std::move(gated);
  dirty_ = true;
}

}  // namespace gdw::kube
