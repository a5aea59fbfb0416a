#include "service/systemd_persistence.h"

#include <systemd/sd-event.h>

#include <cstring>
#include <optional>

#include "log/log.h"

namespace gdw {

SystemdClient* SystemdPersistence::client() {
  if (client_) return client_.get();
  auto client = SystemdClient::connect(config_.systemd.bus_address, event_, config_.systemd.timeout);
  if (!client) {
    if (connect_error_.first())
      log::warn("cannot reach systemd (systemd.bus_address): " + client.error().message +
                "; grants are direct only and a daemon-reload will revoke them again");
    return nullptr;
  }
  connect_error_.reset();
  client_ = std::move(*client);
  (void)client_->on_reloading([this](bool active) {
    if (!active) reload_finished_();
  });
  return client_.get();
}

Result<bool> SystemdPersistence::persist(const std::string& cgroup_dir, const std::vector<WantedDevice>& devices,
                                   std::function<void(const std::string& unit, Status outcome)> answered) {
  const std::string unit = scope_unit_of(cgroup_dir);
  if (unit.empty()) return false;
  SystemdClient* bus = client();
  if (!bus) return false;
  auto started = bus->add_device_allow(unit, devices, [unit, answered = std::move(answered)](Status outcome) {
    answered(unit, std::move(outcome));
  });
  if (!started) return Error{"cannot ask systemd to allow devices in " + unit + ": " + started.error().message};
  return true;
}

Result<std::string> SystemdPersistence::persist_blocking(const Config& config, const std::string& cgroup_dir,
                                                         const std::vector<WantedDevice>& devices) {
  sd_event* raw = nullptr;
  if (int rc = sd_event_new(&raw); rc < 0) return Error{std::string("creating an event loop: ") + std::strerror(-rc)};
  std::unique_ptr<sd_event, decltype(&sd_event_unref)> event(raw, &sd_event_unref);
  SystemdPersistence persistence(config, event.get(), [] {});
  std::optional<std::pair<std::string, Status>> answer;
  auto started = persistence.persist(cgroup_dir, devices, [&answer](const std::string& unit, Status outcome) {
    answer.emplace(unit, std::move(outcome));
  });
  if (!started) return started.error();
  if (!*started)
    return Error{scope_unit_of(cgroup_dir).empty() ? "not in a systemd scope"
                                                   : "cannot reach systemd (systemd.bus_address)"};
  while (!answer) {
    if (int rc = sd_event_run(event.get(), UINT64_MAX); rc < 0)
      return Error{std::string("running the event loop: ") + std::strerror(-rc)};
  }
  if (!answer->second) return answer->second.error();
  return answer->first;
}

}  // namespace gdw
