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

// DeviceAllow= entries for the devices: ("/dev/char/M:m", "rw"), block devices as
// "/dev/block/M:m". A device without access bits is left out: systemd reads an empty
// access string as "rwm".
std::vector<std::pair<std::string, std::string>> device_allow_entries(const std::vector<WantedDevice>& devices);

class SystemdClient {
 public:
  // address empty: the system bus. Attaches to `event` (the daemon's loop). Only the
  // socket is connected here (a unix connect does not wait for the peer); authentication
  // and Hello run on the loop, inside each call's deadline `timeout`. After the bus
  // disconnects, the next call connects again.
  static Result<std::unique_ptr<SystemdClient>> connect(const std::string& address, sd_event* event,
                                                        std::chrono::milliseconds timeout);
  virtual ~SystemdClient() = default;

  // SetUnitProperties(unit, true, [("DeviceAllow", entries)]): systemd appends the entries
  // to the unit's list in a runtime drop-in and re-applies the unit's device policy. `done`
  // is called exactly once, from the loop (never inside this call; it may destroy the
  // client), with the outcome: a D-Bus error or the deadline as an Error. An Error returned
  // here means the call was not started and `done` is never called: so for an empty entry
  // list, because an empty DeviceAllow= would reset the unit's whole list. Destroying the
  // client abandons calls still waiting, without calling their `done`.
  virtual Status add_device_allow(const std::string& unit, const std::vector<WantedDevice>& devices,
                                  std::function<void(Status)> done) = 0;
  // Manager.Reloading(bool) arrives around every daemon-reload; `active` false = finished.
  // Replaces an earlier handler, which must not destroy the client (it runs inside
  // sd-bus's dispatch). The match is installed asynchronously; a failure to
  // install it is logged. After a disconnect the client reconnects (retrying every
  // `timeout`) and then calls the handler with false once: reloads may have been missed.
  virtual Status on_reloading(std::function<void(bool active)> handler) = 0;
};

}  // namespace gdw
