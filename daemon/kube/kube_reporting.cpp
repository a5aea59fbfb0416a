#include "kube/kube_reporting.h"

#include "log/log.h"

namespace gdw::kube {
namespace {

void log_off(const char* what, EventsPolicy policy, const std::string& key, const std::string& why) {
  if (policy == EventsPolicy::kOn) {
    log::error(std::string(what) + " off although " + key + " is true: " + why);
  } else {
    log::info(std::string(what) + " off: " + why);
  }
}

}  // namespace

std::unique_ptr<KubeReporting> KubeReporting::create(const Config& config, EventLoop& loop, Metrics& metrics,
                                                     std::unique_ptr<KubeReporting> previous,
                                                     std::function<void()> recount) {
  std::unique_ptr<StatusPlanner> carried;
  // What the fleet and the daemon last told, until they tell again: a reporter that
  // started from nothing would judge the node healthy for a moment.
  DeviceAccessState told = previous ? std::move(previous->state_) : DeviceAccessState{};
  const bool checked = previous && previous->containers_checked_;
  const bool judged = previous && previous->faults_judged_;
  if (previous && previous->status_) {
    previous->sender_.reset();  // joins the worker: no outcome reaches the old reporter after this
    carried = previous->status_->release();
  }
  previous.reset();  // joins the old threads; their requests in flight are aborted

  std::string why_events, why_conditions;
  const auto events_at = events_endpoint(config, why_events);
  const auto conditions_at = conditions_endpoint(config, why_conditions);
  if (!events_at) log_off("Kubernetes events", config.events.enabled, "events.enabled", why_events);
  if (!conditions_at) log_off("Kubernetes node conditions", config.conditions.enabled, "conditions.enabled", why_conditions);
  if (!events_at && !conditions_at) return nullptr;

  const ApiEndpoint endpoint = events_at ? *events_at : *conditions_at;
  std::unique_ptr<KubeReporting> k(new KubeReporting);
  k->state_ = std::move(told);
  k->containers_checked_ = checked;
  k->faults_judged_ = judged;
  k->sender_ = std::make_unique<EventSender>(endpoint, EventSender::Options{},
                                             [raw = k.get()](SendOutcome o, const std::string& detail) {
                                               if (raw->events_) raw->events_->on_outcome(o, detail);
                                             });
  if (events_at) k->events_ = EventReporter::create(config, endpoint, loop, metrics, *k->sender_);
  if (conditions_at) {
    auto status = StatusReporter::create(config, endpoint, node_name(), loop, metrics, *k->sender_, std::move(carried),
                                         std::move(recount));
    if (status) {
      k->status_ = std::move(*status);
    } else {
      log::error("Kubernetes node conditions off: " + status.error().message);
    }
  }
  return k;
}

void KubeReporting::update() {
  state_.checked = containers_checked_ && faults_judged_;
  if (status_) status_->update(state_);
}

void KubeReporting::container_problems(std::vector<ContainerProblem> problems) {
  state_.problems = std::move(problems);
  update();
}

void KubeReporting::node_faults(std::optional<bool> checkpoint_stale,
                                std::optional<std::vector<std::string>> unresponsive_plugins) {
  faults_judged_ = checkpoint_stale.has_value() && unresponsive_plugins.has_value();
  state_.checkpoint_stale = checkpoint_stale.value_or(false);
  state_.unresponsive_plugins = std::move(unresponsive_plugins).value_or(std::vector<std::string>{});
  update();
}

void KubeReporting::containers_checked() {
  if (containers_checked_) return;
  containers_checked_ = true;
  update();
}

void KubeReporting::containers_unchecked() { containers_checked_ = false; }

KubeReporting::~KubeReporting() {
  sender_.reset();  // first: its worker calls into the reporters
}

}  // namespace gdw::kube
