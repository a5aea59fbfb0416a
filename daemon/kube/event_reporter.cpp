#include "kube/event_reporter.h"

#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include <cstdlib>

#include "log/log.h"

namespace gdw::kube {
std::optional<ApiEndpoint> events_endpoint(const Config& config, std::string& why) {
  if (config.events.enabled == EventsPolicy::kOff) {
    why = "events.enabled: false";
    return std::nullopt;
  }
  auto server = api_server_url(config.kubernetes.api_server, std::getenv("KUBERNETES_SERVICE_HOST"),
                               std::getenv("KUBERNETES_SERVICE_PORT"));
  if (!server) {
    why = "no API server known (kubernetes.api_server is empty and KUBERNETES_SERVICE_HOST is not set)";
    return std::nullopt;
  }
  return ApiEndpoint{*server, config.kubernetes.token_file, config.kubernetes.ca_file};
}

std::unique_ptr<EventReporter> EventReporter::create(const Config& config, const ApiEndpoint& endpoint,
                                                     EventLoop& loop, Metrics& metrics, EventSender& sender) {
  std::unique_ptr<EventReporter> r(new EventReporter(config, endpoint, metrics, sender));
  if (auto s = r->attach(loop); !s) {
    log::error("Kubernetes events off: " + s.error().message);
    return nullptr;
  }
  log::info("Kubernetes events to " + endpoint.server + " (at most " +
            std::to_string(config.events.pod_writes_per_minute) + " API writes per pod per minute)");
  return r;
}

EventReporter::EventReporter(const Config& config, const ApiEndpoint& endpoint, Metrics& metrics,
                             EventSender& sender)
    : metrics_(metrics),
      loop_metrics_(metrics),
      aggregator_(AggregatorOptions{.writes_per_minute = config.events.pod_writes_per_minute,
                                    .source = ReportingSource{"gpu-devwatch", node_name()}}),
      server_(endpoint.server),
      sender_(sender) {}

EventReporter::~EventReporter() {
  wake_source_ = gdw::EventSource();
  if (wake_fd_ >= 0) ::close(wake_fd_);
}

Status EventReporter::attach(EventLoop& loop) {
  wake_fd_ = ::eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
  if (wake_fd_ < 0) return Error{"eventfd failed"};
  auto wake = loop.add_io(wake_fd_, EPOLLIN, [this](std::uint32_t) { log_outcomes(); }, "events-log");
  if (!wake) return wake.error();
  wake_source_ = std::move(*wake);
  // Lowest priority: repairs first.
  auto timer = loop.add_timer([this] {
    send(aggregator_.flush(Clock::now()));
    schedule_flush();
  }, "events-flush", std::nullopt, 10);
  if (!timer) return timer.error();
  flush_timer_ = std::move(*timer);
  return {};
}

void EventReporter::report(Cause cause, const IncidentFacts& facts) {
  bool invalid = false;
  auto writes = aggregator_.record(make_incident(cause, facts), Clock::now(), WallClock::now(), &invalid);
  if (invalid) {
    metrics_.event_dropped("invalid_object");
    log::debug("no Kubernetes event: the pod reference is not a valid namespace/name/uid");
    return;
  }
  send(std::move(writes));
  schedule_flush();
}

void EventReporter::send(std::vector<EventWrite> writes) {
  for (auto& w : writes)
    if (!sender_.enqueue(std::move(w))) metrics_.event_dropped("queue_full");
}

void EventReporter::schedule_flush() {
  auto next = aggregator_.next_flush();
  if (!next) return;
  const auto delay = std::max(Clock::duration::zero(), *next - Clock::now());
  if (auto s = flush_timer_.arm(std::chrono::duration_cast<std::chrono::microseconds>(delay) +
                                std::chrono::microseconds(1));
      !s) {
    loop_metrics_.event_loop_error("events-flush");
  }
}

void EventReporter::on_outcome(SendOutcome outcome, const std::string& detail) {
  if (outcome == SendOutcome::kSent) {
    metrics_.event_sent();
  } else {
    metrics_.event_dropped(drop_reason(outcome));
  }
  std::lock_guard lock(mu_);
  if (outcome == last_outcome_) return;
  last_outcome_ = outcome;
  changes_.emplace_back(outcome, detail);
  const std::uint64_t one = 1;
  (void)!::write(wake_fd_, &one, sizeof one);
}

void EventReporter::log_outcomes() {
  std::uint64_t n = 0;
  (void)!::read(wake_fd_, &n, sizeof n);
  std::vector<std::pair<SendOutcome, std::string>> changes;
  {
    std::lock_guard lock(mu_);
    changes.swap(changes_);
  }
  for (const auto& [outcome, detail] : changes) {
    if (outcome == SendOutcome::kSent) {
      log::info("Kubernetes events reach " + server_ + " again");
    } else {
      log::warn("Kubernetes events to " + server_ + " are dropped (" + drop_reason(outcome) + "): " + detail +
                "; counted in gpu_devwatch_events_dropped_total");
    }
  }
}

}  // namespace gdw::kube
