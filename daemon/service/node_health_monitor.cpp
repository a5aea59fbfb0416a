#include "service/node_health_monitor.h"

#include <sys/epoll.h>

#include <algorithm>

#include "log/log.h"

namespace gdw {
namespace {

using std::chrono::duration_cast;
using std::chrono::microseconds;

// A remediation restarts kubelet; if the next checkpoint is stale again, something else is
// wrong and restarting kubelet in a loop would only make it worse.
constexpr auto kRemediationMinInterval = std::chrono::hours(1);

std::string join(const std::vector<std::string>& items) {
  std::string s;
  for (const auto& i : items) s += (s.empty() ? "" : ", ") + i;
  return s;
}

}  // namespace

NodeHealthMonitor::NodeHealthMonitor(const Config& config, EventLoop& loop, Metrics& metrics, NodeModel& node,
                                     const ContainerLister& containers, NvmlRunner& nvml,
                                     std::function<void(HealthChange)> changed)
    : config_(config),
      loop_(loop),
      metrics_(metrics),
      node_(node),
      containers_(containers),
      nvml_(nvml),
      changed_(std::move(changed)) {}

NodeHealthMonitor::~NodeHealthMonitor() = default;

Status NodeHealthMonitor::start() {
  auto gatherer = HealthGatherer::create(config_, config_.kubelet.pod_resources_interval);
  if (!gatherer) return gatherer.error();
  gatherer_ = std::move(*gatherer);
  if (gatherer_->asks_pod_resources()) {
    auto io = loop_.add_io(gatherer_->pod_resources_fd(), EPOLLIN, [this](std::uint32_t) { on_pod_resources(); },
                           "pod-resources");
    if (!io) return io.error();
    pod_resources_io_ = std::move(*io);
    auto timer = loop_.add_timer([this] { poll_pod_resources(); }, "pod-resources-timer", microseconds(0));
    if (!timer) return timer.error();
    pod_resources_timer_ = std::move(*timer);
  }
  auto io = loop_.add_io(gatherer_->plugins_fd(), EPOLLIN, [this](std::uint32_t) { on_plugins(); }, "device-plugins");
  if (!io) return io.error();
  prober_io_ = std::move(*io);
  auto timer = loop_.add_timer([this] { poll_plugins(); }, "device-plugins-timer", microseconds(0));
  if (!timer) return timer.error();
  prober_timer_ = std::move(*timer);
  return {};
}

void NodeHealthMonitor::first_answer() {
  if (pod_resources_answered_) return;
  pod_resources_answered_ = true;
  changed_(HealthChange::kFirstAnswers);
}

void NodeHealthMonitor::poll_pod_resources() {
  if (auto s = gatherer_->ask_pod_resources(); !s) {
    log::debug("PodResources: " + s.error().message);
    // No call, no outcome to wait for: the checkpoint is all there is for now.
    first_answer();
  }
  (void)pod_resources_timer_.arm(duration_cast<microseconds>(config_.kubelet.pod_resources_interval));
}

void NodeHealthMonitor::on_pod_resources() {
  auto reading = gatherer_->take_pod_resources();
  if (!reading) return;
  metrics_.pod_resources_call(reading->state, reading->latency_seconds);
  if (reading->state != pod_resources_state_) {
    if (reading->ok)
      log::info("PodResources API answers (" + std::to_string(reading->containers.size()) + " containers)");
    else
      log::warn("PodResources API: " + reading->message + "; keeping the last good record");
    pod_resources_state_ = reading->state;
  }
  if (reading->ok) take_pod_resources(std::move(reading->containers));
  first_answer();
}

void NodeHealthMonitor::take_pod_resources(std::vector<PodResourcesContainer> containers) {
  node_.set_pod_resources(std::move(containers));
  const auto& merged = node_.merged();
  metrics_.set_allocation_disagreements(merged.disagreements.size());
  std::set<std::string> now;
  for (const auto& d : merged.disagreements) now.insert(describe(d));
  for (const auto& text : disagreements_logged_.still(now)) log::warn("checkpoint and PodResources disagree: " + text);
  changed_(HealthChange::kAllocations);
}

void NodeHealthMonitor::poll_plugins() {
  if (auto s = gatherer_->ask_plugins(); !s) {
    log::debug("device plugins: " + s.error().message);
    // No socket to ask (no directory): no plugin is known to hang.
    if (!plugins_probed_) {
      plugins_probed_ = true;
      changed_(HealthChange::kFaults);
    }
  }
  (void)prober_timer_.arm(duration_cast<microseconds>(config_.kubelet.plugin_probe_interval));
}

void NodeHealthMonitor::on_plugins() {
  auto round = gatherer_->take_plugins();
  if (!round) return;
  std::map<std::string, bool> now;
  for (const auto& p : *round) {
    now[p.socket] = p.up;
    metrics_.set_device_plugin(p.socket, p.up, static_cast<double>(p.latency.count()) / 1e6);
    auto before = plugin_up_.find(p.socket);
    if (before == plugin_up_.end() || before->second != p.up) {
      if (p.up) {
        log::info("device plugin " + p.socket + " answers");
      } else {
        log::error("device plugin " + p.socket + " does not answer: " + (p.error ? p.error->message : "") +
                   " — kubelet waits on such a plugin without a timeout and admits no pod needing it");
      }
    }
  }
  for (const auto& [socket, up] : plugin_up_)
    if (!now.count(socket)) metrics_.forget_device_plugin(socket);
  const bool changed = now != plugin_up_ || !plugins_probed_;
  plugin_up_ = std::move(now);
  plugins_probed_ = true;
  if (changed) changed_(HealthChange::kFaults);
}

std::vector<std::string> NodeHealthMonitor::unresponsive_plugins() const {
  std::vector<std::string> down;
  for (const auto& [socket, up] : plugin_up_)
    if (!up) down.push_back(socket);
  return down;
}

void NodeHealthMonitor::checkpoint_or_inventory_changed() { judge(); }

void NodeHealthMonitor::inventory_refreshed(bool ok, std::chrono::steady_clock::time_point started) {
  // Only a query started after we asked counts: one already under way may have read NVML
  // before the change whose evidence we are checking (judge() then asks again).
  if (watch_.refresh_pending && started >= watch_.refresh_asked) {
    watch_.refresh_pending = false;
    (ok ? watch_.fresh : watch_.refresh_failed) = true;
  } else if (watch_.refresh_pending) {
    watch_.refresh_pending = false;
  }
  judge();
}

void NodeHealthMonitor::judge(int depth) {
  const StaleCheckpointReport report = node_.stale_report();
  metrics_.set_checkpoint_stale(report.stale, report.unknown_ids.size());
  if (report.stale != stale_) {
    if (report.stale) {
      log::error("kubelet checkpoint is stale: " + join(report.reasons) +
                 (report.unknown_ids.empty() ? "" : "; unknown device IDs: " + join(report.unknown_ids)));
    } else if (stale_) {
      log::info("kubelet checkpoint describes this host again");
    }
    stale_ = report.stale;
    changed_(HealthChange::kFaults);
  }
  if (std::string key = stale_evidence_key(report); key != watch_.evidence) {
    // New evidence: confirmed from the start, against an inventory newer than it.
    const bool pending = watch_.refresh_pending;
    watch_ = StaleWatch{};
    watch_.evidence = std::move(key);
    watch_.refresh_pending = pending;
    watch_.refresh_asked = std::chrono::steady_clock::now();
  }
  RemediationInputs in;
  in.stale = report.stale;
  in.enabled = config_.kubelet.remediate_stale_checkpoint;
  in.inventory_fresh = watch_.fresh;
  in.refresh_failed = watch_.refresh_failed;
  in.stale_since = watch_.since;
  in.next_check = watch_.next_check;
  in.pending_hold = watch_.pending_hold;
  in.now = std::chrono::steady_clock::now();
  in.confirm_after = config_.kubelet.stale_confirm_after;
  // Only worth reading the cgroups when nothing else holds the remediation back.
  if (in.stale && in.enabled && in.inventory_fresh && in.stale_since && in.now - *in.stale_since >= in.confirm_after) {
    in.holders = checkpoint_device_holders(node_.checkpoint().checkpoint, config_.devices.resources,
                                           containers_.running_containers());
  }
  const RemediationDecision decision = decide_remediation(in);
  if (decision.action == RemediationAction::kRefreshInventory) {
    request_refresh(report);
    // A refresh that is already decided (the host re-read, or a query that could not
    // start) is judged at once; a NVML answer comes to inventory_refreshed().
    if ((watch_.fresh || watch_.refresh_failed) && depth < 2) return judge(depth + 1);
  }
  act(decision, in.holders);
}

void NodeHealthMonitor::request_refresh(const StaleCheckpointReport& report) {
  if (watch_.refresh_pending) return;
  watch_.refresh_asked = std::chrono::steady_clock::now();
  // /proc and /dev are read again now (the callers re-resolve the containers after us).
  node_.load_inventory();
  const bool rests_on_nvml = std::any_of(report.unknown_ids.begin(), report.unknown_ids.end(),
                                         [](const std::string& id) { return id.rfind("MIG-", 0) == 0; });
  if (!rests_on_nvml) {
    watch_.fresh = true;
    return;
  }
  watch_.refresh_pending = nvml_.running() || nvml_.start(config_);
  if (!watch_.refresh_pending) watch_.refresh_failed = true;
}

void NodeHealthMonitor::act(const RemediationDecision& decision, const std::vector<std::string>& holders) {
  if (decision.action != RemediationAction::kNone)
    log::debug("stale checkpoint check: " + std::string(to_string(decision.action)) + " (" +
               std::string(to_string(decision.hold)) + ", " + std::to_string(holders.size()) + " holder(s))");
  switch (decision.action) {
    case RemediationAction::kNone:
      recheck_timer_.disarm();
      report_hold(RemediationHold::kNone, holders);
      return;
    case RemediationAction::kRefreshInventory:
      report_hold(decision.hold, holders);
      return;
    case RemediationAction::kWait:
    case RemediationAction::kHold:
      if (decision.starts_window) watch_.since = std::chrono::steady_clock::now();
      if (watch_.next_check != decision.recheck_at) {
        // A new window or back-off: the verdict that set it is used up, and a failed
        // refresh is tried again when it ends.
        watch_.fresh = false;
        watch_.refresh_failed = false;
        watch_.next_check = decision.recheck_at;
        watch_.pending_hold = decision.hold;
      }
      // Also when unchanged: the loop's timers count from its iteration's start and may
      // fire a little before `recheck_at`; the check then waits, and must be re-armed.
      if (decision.recheck_at) arm_recheck(*decision.recheck_at);
      report_hold(decision.hold, holders);
      return;
    case RemediationAction::kRemediate:
      report_hold(RemediationHold::kNone, holders);
      remediate(node_.stale_report());
      // Not again for the same evidence before the restart had its chance (kubelet writes
      // a new checkpoint, which is new evidence or none).
      watch_.fresh = false;
      watch_.next_check = std::chrono::steady_clock::now() + kRemediationMinInterval;
      return;
  }
}

void NodeHealthMonitor::report_hold(RemediationHold hold, const std::vector<std::string>& holders) {
  metrics_.set_checkpoint_remediation_held(std::string(to_string(hold)));
  if (hold == watch_.logged_hold) return;
  watch_.logged_hold = hold;
  const std::string what = "stale kubelet checkpoint not remediated";
  switch (hold) {
    case RemediationHold::kNone: return;
    case RemediationHold::kInventoryUnconfirmed:
      log::info(what + " yet: judging it again against a fresh inventory (NVML asked again); a cached or failed "
                       "answer confirms nothing");
      return;
    case RemediationHold::kAwaitingConfirmation:
      log::warn(what + " yet: it must still be stale at a second check " +
                format_duration(config_.kubelet.stale_confirm_after) + " later (kubelet.stale_confirm_after)");
      return;
    case RemediationHold::kDevicesInUse:
      log::warn(what + ": running containers hold devices it names (" + join(holders) +
                "); restarting kubelet under them is not done");
      return;
  }
}

void NodeHealthMonitor::arm_recheck(std::chrono::steady_clock::time_point at) {
  if (!recheck_timer_) {
    auto t = loop_.add_timer([this] {
      judge();
      changed_(HealthChange::kAllocations);  // the inventory may have been read again
    }, "stale-checkpoint-recheck");
    if (!t) {
      log::error("cannot create the stale-checkpoint timer: " + t.error().message);
      return;
    }
    recheck_timer_ = std::move(*t);
  }
  const auto now = std::chrono::steady_clock::now();
  const auto delay = at > now ? duration_cast<microseconds>(at - now) : microseconds(0);
  if (auto s = recheck_timer_.arm(delay + std::chrono::milliseconds(1)); !s)
    log::error("cannot arm the stale-checkpoint timer: " + s.error().message);
}

void NodeHealthMonitor::remediate(const StaleCheckpointReport& report) {
  const auto now = std::chrono::steady_clock::now();
  if (restart_ || (last_remediation_ && now - *last_remediation_ < kRemediationMinInterval)) return;
  last_remediation_ = now;
  RemediationOptions options{config_.kubelet.checkpoint,
                             UnitRestartOptions{config_.systemd.bus_address, config_.kubelet.unit, config_.systemd.timeout}};
  auto started = start_remediation(loop_.native(), options, std::chrono::system_clock::now(),
                                   [this](Result<std::string> job) {
                                     metrics_.checkpoint_remediation(job.ok());
                                     if (job) {
                                       log::warn("kubelet restart queued (" + *job + ") after the stale checkpoint");
                                     } else {
                                       log::error("restarting " + config_.kubelet.unit + " failed: " + job.error().message);
                                     }
                                     restart_.reset();
                                   });
  if (!started) {
    metrics_.checkpoint_remediation(false);
    log::error("cannot remediate the stale checkpoint: " + started.error().message);
    return;
  }
  log::warn("stale kubelet checkpoint moved aside to " + started->moved_to + " (" + join(report.reasons) +
            "); restarting " + config_.kubelet.unit);
  restart_ = std::move(started->restart);
}

}  // namespace gdw
