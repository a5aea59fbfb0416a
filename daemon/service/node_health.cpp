#include "service/node_health.h"

#include <sys/epoll.h>

#include "log/log.h"

namespace gdw {
namespace {

using std::chrono::duration_cast;
using std::chrono::microseconds;

// A remediation restarts kubelet; if the next checkpoint is stale again, something else is
// wrong and restarting kubelet in a loop would only make it worse.
constexpr auto kRemediationMinInterval = std::chrono::hours(1);

double seconds(std::chrono::microseconds us) { return static_cast<double>(us.count()) / 1e6; }

std::string join(const std::vector<std::string>& items) {
  std::string s;
  for (const auto& i : items) s += (s.empty() ? "" : ", ") + i;
  return s;
}

}  // namespace

NodeHealthMonitor::NodeHealthMonitor(const Config& config, EventLoop& loop, Metrics& metrics, NodeModel& node,
                                     std::function<void()> on_allocations_changed)
    : config_(config), loop_(loop), metrics_(metrics), node_(node),
      on_allocations_changed_(std::move(on_allocations_changed)) {}

NodeHealthMonitor::~NodeHealthMonitor() = default;

Status NodeHealthMonitor::start() {
  if (config_.kubelet.source != AllocationSource::kCheckpoint) {
    auto client = PodResourcesClient::create({config_.kubelet.pod_resources_socket, config_.kubelet.pod_resources_timeout,
                                              config_.kubelet.pod_resources_interval});
    if (!client) return client.error();
    pod_resources_ = std::move(*client);
    auto io = loop_.add_io(pod_resources_->fd(), EPOLLIN, [this](std::uint32_t) { on_pod_resources(); }, "pod-resources");
    if (!io) return io.error();
    pod_resources_io_ = std::move(*io);
    auto timer = loop_.add_timer([this] { poll_pod_resources(); }, "pod-resources-timer", microseconds(0));
    if (!timer) return timer.error();
    pod_resources_timer_ = std::move(*timer);
  }
  auto prober = DevicePluginProber::create(config_.kubelet.device_plugins_dir, config_.kubelet.plugin_probe_timeout);
  if (!prober) return prober.error();
  prober_ = std::move(*prober);
  auto io = loop_.add_io(prober_->fd(), EPOLLIN, [this](std::uint32_t) { on_plugins(); }, "device-plugins");
  if (!io) return io.error();
  prober_io_ = std::move(*io);
  auto timer = loop_.add_timer([this] { poll_plugins(); }, "device-plugins-timer", microseconds(0));
  if (!timer) return timer.error();
  prober_timer_ = std::move(*timer);
  return {};
}

void NodeHealthMonitor::poll_pod_resources() {
  if (!pod_resources_->busy()) {
    if (auto s = pod_resources_->start_list(); !s) log::debug("PodResources: " + s.error().message);
  }
  (void)pod_resources_timer_.arm(duration_cast<microseconds>(config_.kubelet.pod_resources_interval));
}

void NodeHealthMonitor::on_pod_resources() {
  auto outcome = pod_resources_->take();
  if (!outcome) return;
  const std::string state = outcome->ok() ? "ok" : to_string(outcome->error->kind);
  metrics_.pod_resources_call(state, seconds(outcome->latency));
  if (state != pod_resources_state_) {
    if (outcome->ok()) {
      log::info("PodResources API answers (" + std::to_string(outcome->containers.size()) + " containers)");
    } else {
      log::warn("PodResources API: " + outcome->error->message + "; keeping the last good record");
    }
    pod_resources_state_ = state;
  }
  if (!outcome->ok()) return;
  node_.set_pod_resources(std::move(outcome->containers));
  const auto& merged = node_.merged();
  metrics_.set_allocation_disagreements(merged.disagreements.size());
  std::set<std::string> now;
  for (const auto& d : merged.disagreements) {
    std::string text = describe(d);
    if (!disagreements_logged_.count(text)) log::warn("checkpoint and PodResources disagree: " + text);
    now.insert(std::move(text));
  }
  disagreements_logged_ = std::move(now);
  on_allocations_changed_();
}

void NodeHealthMonitor::poll_plugins() {
  if (!prober_->busy()) {
    if (auto s = prober_->start(); !s) log::debug("device plugins: " + s.error().message);
  }
  (void)prober_timer_.arm(duration_cast<microseconds>(config_.kubelet.plugin_probe_interval));
}

void NodeHealthMonitor::on_plugins() {
  auto round = prober_->take();
  if (!round) return;
  std::map<std::string, bool> now;
  for (const auto& p : *round) {
    now[p.socket] = p.up;
    metrics_.set_device_plugin(p.socket, p.up, seconds(p.latency));
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
  plugin_up_ = std::move(now);
}

void NodeHealthMonitor::checkpoint_or_inventory_changed() {
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
  }
  if (report.stale && config_.kubelet.remediate_stale_checkpoint) remediate(report);
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
