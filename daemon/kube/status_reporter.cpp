#include "kube/status_reporter.h"

#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include <cstdlib>

#include "log/log.h"

namespace gdw::kube {
namespace {

const char* object_of(const PlannedWrite& w) { return w.node ? "node" : "pod"; }

const char* status_text(bool status) { return status ? "True" : "False"; }

}  // namespace

std::optional<ApiEndpoint> conditions_endpoint(const Config& config, std::string& why) {
  if (config.conditions.enabled == EventsPolicy::kOff) {
    why = "conditions.enabled: false";
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

Result<std::unique_ptr<StatusReporter>> StatusReporter::create(const Config& config, const ApiEndpoint& endpoint,
                                                               const std::string& node, EventLoop& loop,
                                                               Metrics& metrics, EventSender& sender,
                                                               std::unique_ptr<StatusPlanner> carried,
                                                               std::function<void()> recount) {
  StatusOptions options;
  options.node_path = node_status_path(node);
  options.grace = config.conditions.grace;
  options.resync = config.conditions.resync;
  options.seed = random_seed();
  if (carried) {
    carried->set_options(options);
  } else {
    carried = std::make_unique<StatusPlanner>(options);
  }
  std::unique_ptr<StatusReporter> r(new StatusReporter(metrics, sender, std::move(carried), endpoint.server));
  r->recount_ = std::move(recount);
  if (auto s = r->attach(loop); !s) return s.error();
  if (options.node_path.empty()) {
    return Error{"the node name '" + node + "' (NODE_NAME, else the host name) is not a valid node name"};
  }
  std::string gate = "readiness gate off (conditions.readiness_gate: false)";
  if (config.conditions.readiness_gate) {
    PodWatchOptions w;
    w.node = node;
    r->watcher_ = std::make_unique<PodWatcher>(endpoint, w, [raw = r.get()] {
      const std::uint64_t one = 1;
      (void)!::write(raw->wake_fd_, &one, sizeof one);
    });
    gate = "readiness gate " + std::string(kReadinessGate) + " for this node's pods that declare it";
  }
  log::info("Kubernetes node conditions for node " + node + " to " + endpoint.server + " (grace " +
            format_duration(config.conditions.grace) + ", re-asserted every " +
            format_duration(config.conditions.resync) + "); " + gate);
  r->tick();  // a reporter that replaced another goes on at once
  return r;
}

StatusReporter::StatusReporter(Metrics& metrics, EventSender& sender, std::unique_ptr<StatusPlanner> planner,
                               std::string server)
    : metrics_(metrics), loop_metrics_(metrics), sender_(sender), planner_(std::move(planner)), server_(std::move(server)) {}

StatusReporter::~StatusReporter() {
  watcher_.reset();  // joins the watch thread: nothing writes wake_fd_ after this
  timer_ = gdw::EventSource();
  wake_source_ = gdw::EventSource();
  if (wake_fd_ >= 0) ::close(wake_fd_);
}

Status StatusReporter::attach(EventLoop& loop) {
  wake_fd_ = ::eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
  if (wake_fd_ < 0) return Error{"eventfd failed"};
  auto wake = loop.add_io(wake_fd_, EPOLLIN, [this](std::uint32_t) { on_wake(); }, "conditions-wake", 10);
  if (!wake) return wake.error();
  wake_source_ = std::move(*wake);
  // Low priority, as the events' flush: repairs first.
  auto timer = loop.add_timer([this] { tick(); }, "conditions", std::nullopt, 10);
  if (!timer) return timer.error();
  timer_ = std::move(*timer);
  return {};
}

std::unique_ptr<StatusPlanner> StatusReporter::release() {
  watcher_.reset();
  take_outcomes();  // the worker is joined: every outcome it had is here
  if (planner_) planner_->abandon_in_flight();
  return std::move(planner_);
}

void StatusReporter::update(const DeviceAccessState& state) {
  if (!planner_) return;
  planner_->observe(state, Clock::now());
  tick();
}

void StatusReporter::tick() {
  if (!planner_) return;
  const NodeConditions before = planner_->node_conditions();
  auto writes = planner_->plan(Clock::now(), WallClock::now());
  report_conditions(before);
  send(std::move(writes));
  const auto now = Clock::now();
  auto next = planner_->next_wake(now);
  if (!next) {
    timer_.disarm();
  } else {
    const auto delay =
        std::chrono::duration_cast<std::chrono::microseconds>(std::max(Clock::duration::zero(), *next - now));
    if (auto s = timer_.arm(delay + std::chrono::milliseconds(1)); !s) loop_metrics_.event_loop_error("conditions");
  }
  // Last: the recount comes back through update(), which ticks again.
  if (planner_->take_wanted_check() && recount_) recount_();
}

void StatusReporter::send(std::vector<PlannedWrite> writes) {
  for (auto& w : writes) {
    StatusWrite sw;
    sw.path = w.path;
    sw.body = w.body;
    sw.read = w.read;
    sw.done = [this, w](SendOutcome outcome, long http_status, const std::string& detail) {  // worker thread
      {
        std::lock_guard lock(mu_);
        outcomes_.push_back(Outcome{w, outcome, http_status, detail});
      }
      const std::uint64_t one = 1;
      (void)!::write(wake_fd_, &one, sizeof one);
    };
    if (!sender_.enqueue_status(std::move(sw))) {
      planner_->written(w, false, Clock::now());
      if (!w.read) metrics_.status_write(object_of(w), "queue_full");
    }
  }
}

void StatusReporter::on_wake() {
  std::uint64_t n = 0;
  (void)!::read(wake_fd_, &n, sizeof n);
  take_outcomes();
  take_watch();
  tick();
}

void StatusReporter::take_outcomes() {
  std::vector<Outcome> outcomes;
  {
    std::lock_guard lock(mu_);
    outcomes.swap(outcomes_);
  }
  for (const auto& o : outcomes) {
    if (o.write.read) {
      take_node_read(o);
      continue;
    }
    if (planner_) planner_->written(o.write, o.outcome == SendOutcome::kSent, Clock::now());
    report_outcome(o);
  }
}

void StatusReporter::take_node_read(const Outcome& o) {
  std::string why = o.detail;
  if (o.outcome == SendOutcome::kSent) {
    auto prior = parse_node_conditions(o.detail);
    if (prior) {
      if (planner_) planner_->node_read(*prior, Clock::now());
      log::info("node conditions as they stand read from " + server_ + "; nothing is written until the first check");
      return;
    }
    why = prior.error().message;
  }
  if (planner_) planner_->written(o.write, false, Clock::now());
  log::warn("node conditions: reading the node failed (" + why.substr(0, 512) +
            "); no condition is written before it is read; retried with back-off");
}

void StatusReporter::report_outcome(const Outcome& o) {
  const bool sent = o.outcome == SendOutcome::kSent;
  metrics_.status_write(object_of(o.write), sent ? "sent" : drop_reason(o.outcome));
  auto& last = o.write.node ? last_node_outcome_ : last_pod_outcome_;
  if (last == o.outcome) return;
  const bool first = !last;
  last = o.outcome;
  const std::string what = o.write.node ? "node conditions" : "pod readiness gate conditions";
  if (sent) {
    log::info(what + (first ? " written to " : " reach ") + server_ + (first ? "" : " again"));
  } else {
    log::warn(what + " not written to " + server_ + " (" + drop_reason(o.outcome) + "): " + o.detail +
              "; retried with back-off (gpu_devwatch_status_writes_total)");
  }
}

void StatusReporter::report_conditions(const NodeConditions& before) {
  if (!planner_ || !planner_->started()) return;
  const NodeConditions& now = planner_->node_conditions();
  for (std::size_t i = 0; i < now.size(); ++i) {
    const char* type = condition_type_name(static_cast<NodeConditionType>(i));
    metrics_.set_node_condition(type, now[i].status);
    const bool first = before[i].reason.empty();
    if ((first && !now[i].status) || (!first && before[i].status == now[i].status)) continue;
    const std::string line = std::string("node condition ") + type + " " + status_text(now[i].status) + " (" +
                             now[i].reason + "): " + now[i].message;
    if (now[i].status) {
      log::warn(line);
    } else {
      log::info(line);
    }
  }
}

void StatusReporter::take_watch() {
  if (!watcher_ || !planner_) return;
  PodWatchView v = watcher_->view();
  if (v.generation == watch_generation_) return;
  watch_generation_ = v.generation;
  planner_->set_gated_pods(v.pods, Clock::now());
  metrics_.set_readiness_gate_pods(v.pods.size());
  metrics_.set_pod_watch_up(v.synced && v.problem.empty());
  metrics_.pod_watch_lists(v.lists - watch_seen_.lists);
  metrics_.pod_watch_skipped(v.skipped - watch_seen_.skipped);
  const bool first_sync = v.synced && !watch_seen_.synced;
  if (v.problem != watch_problem_ || first_sync) {
    if (v.problem.empty()) {
      log::info("pod readiness gate: watching this node's pods (" + std::to_string(v.pods.size()) +
                " declare " + std::string(kReadinessGate) + ")");
    } else {
      log::warn("pod readiness gate: " + v.problem + "; retried with back-off");
    }
    watch_problem_ = v.problem;
  }
  watch_seen_ = std::move(v);
}

}  // namespace gdw::kube
