// systemd cgroup driver: make systemd itself include a container's missing GPU nodes in its
// scope's DeviceAllow= (SetUnitProperties, runtime=true), so later `systemctl
// daemon-reload`s keep them. Over sd-bus, asynchronously on the daemon's sd-event loop,
// every call with a deadline: a systemd that does not answer never stalls the loop.
#pragma once

#include <chrono>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "core/desired_state.h"
#include "core/result.h"

struct sd_event;

namespace gdw {

// The unit of a container cgroup under the systemd driver: the leaf directory name when it
// ends in ".scope" ("cri-containerd-<id>.scope"), else empty.
std::string scope_unit_of(const std::string& cgroup_dir);

// DeviceAllow= entries for the devices: ("/dev/char/M:m", "rw").
std::vector<std::pair<std::string, std::string>> device_allow_entries(const std::vector<WantedDevice>& devices);

class SystemdClient {
 public:
  // address empty: the system bus. Attaches to `event` (the daemon's loop).
  static Result<std::unique_ptr<SystemdClient>> connect(const std::string& address, sd_event* event,
                                                        std::chrono::milliseconds timeout);
  virtual ~SystemdClient() = default;

  // SetUnitProperties(unit, true, [("DeviceAllow", entries)]). `done` is called on the loop
  // with the outcome (a D-Bus error or the deadline as an Error).
  virtual Status add_device_allow(const std::string& unit, const std::vector<WantedDevice>& devices,
                                  std::function<void(Status)> done) = 0;
  // Manager.Reloading(bool) arrives around every daemon-reload; `active` false = finished.
  virtual Status on_reloading(std::function<void(bool active)> handler) = 0;
};

// Blocking variant for one-shot commands (`check --repair`): connect, call, wait ≤ timeout.
Status add_device_allow_blocking(const std::string& address, const std::string& unit,
                                 const std::vector<WantedDevice>& devices, std::chrono::milliseconds timeout);

}  // namespace gdw
