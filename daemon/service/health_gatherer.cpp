#include "service/health_gatherer.h"

#include <poll.h>

namespace gdw {
namespace {

// Waits for fd to become readable, at most `timeout` (one-shot commands only).
void wait_readable(int fd, Duration timeout) {
  pollfd p{fd, POLLIN, 0};
  ::poll(&p, 1, static_cast<int>(timeout.count()) + 500);
}

}  // namespace

Result<std::unique_ptr<HealthGatherer>> HealthGatherer::create(const Config& config, Duration pod_resources_interval) {
  auto gatherer = std::make_unique<HealthGatherer>();
  if (config.kubelet.source != AllocationSource::kCheckpoint) {
    auto client = PodResourcesClient::create(
        {config.kubelet.pod_resources_socket, config.kubelet.pod_resources_timeout, pod_resources_interval});
    if (!client) return client.error();
    gatherer->pod_resources_ = std::move(*client);
  }
  auto prober = DevicePluginProber::create(config.kubelet.device_plugins_dir, config.kubelet.plugin_probe_timeout);
  if (!prober) return prober.error();
  gatherer->plugins_ = std::move(*prober);
  return gatherer;
}

Status HealthGatherer::ask_pod_resources() {
  if (!pod_resources_ || pod_resources_->busy()) return {};
  return pod_resources_->start_list();
}

Status HealthGatherer::ask_plugins() {
  if (plugins_->busy()) return {};
  return plugins_->start();
}

std::optional<PodResourcesReading> HealthGatherer::take_pod_resources() {
  if (!pod_resources_) return std::nullopt;
  auto outcome = pod_resources_->take();
  if (!outcome) return std::nullopt;
  PodResourcesReading r;
  r.ok = outcome->ok();
  r.latency_seconds = static_cast<double>(outcome->latency.count()) / 1e6;
  if (r.ok) {
    r.state = "ok";
    r.message = std::to_string(outcome->containers.size()) + " container(s) listed";
    r.containers = std::move(outcome->containers);
  } else {
    r.state = to_string(outcome->error->kind);
    r.message = r.state + ": " + outcome->error->message;
  }
  return r;
}

std::optional<std::vector<DevicePluginProbe>> HealthGatherer::take_plugins() { return plugins_->take(); }

HealthGatherer::Once HealthGatherer::gather_once(const Config& config) {
  Once once;
  if (pod_resources_) {
    if (auto s = ask_pod_resources(); !s) {
      once.pod_resources_error = s.error().message;
    } else {
      wait_readable(pod_resources_->fd(), config.kubelet.pod_resources_timeout);
      once.pod_resources = take_pod_resources();
      if (!once.pod_resources)
        once.pod_resources_error = "no answer within " + format_duration(config.kubelet.pod_resources_timeout);
    }
  }
  if (auto s = ask_plugins(); !s) {
    once.plugins_error = s.error().message;
  } else {
    wait_readable(plugins_->fd(), config.kubelet.plugin_probe_timeout);
    if (auto round = take_plugins()) once.plugins = std::move(*round);
  }
  return once;
}

}  // namespace gdw
