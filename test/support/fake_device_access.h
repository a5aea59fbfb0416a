// An in-memory DeviceAccess for the repair loop's tests: the device policy of containers
// as a map, what each allows and which grants it refuses; no root, no cgroup.
#pragma once

#include <cerrno>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "backend/device_access.h"

namespace gdw::test {

// The device policy of containers as a map: what each allows, which grants it refuses.
class FakeDeviceAccess final : public DeviceAccess {
 public:
  std::map<std::string, std::set<DeviceNumber>> allowed;
  std::set<DeviceNumber> refused;  // a parent denies these
  std::set<std::string> unreadable;
  int observes = 0, grants = 0;
  std::vector<AttachedProgram> attached_observes;  // observe_attached() calls, in order
  bool next_grant_work = false;  // what next_grant_work_due() says

  std::string description() const override { return "fake"; }
  std::string observed_source() const override { return "fake"; }
  std::vector<std::string> rule_files() const override { return {}; }
  bool policy_in_programs() const override { return false; }
  Result<std::uint32_t> hierarchy_id(const std::string&) const override { return 0u; }
  bool next_grant_work_due() const override { return next_grant_work; }
  Result<DeviceState> observe(const std::string& dir, const DesiredDevices& desired) override {
    ++observes;
    if (unreadable.count(dir)) return errno_error(EIO, "cannot read");
    auto it = allowed.find(dir);
    if (it == allowed.end()) return errno_error(ENOENT, "gone");
    DeviceState s;
    for (const auto& w : desired.wanted)
      if (!it->second.count(w.dev)) s.missing.push_back(w);
    return s;
  }
  Result<DeviceState> observe_attached(const std::string& dir, const DesiredDevices& desired,
                                       const AttachedProgram& attached) override {
    attached_observes.push_back(attached);
    return observe(dir, desired);
  }
  GrantReport grant(const std::string& dir, const std::vector<WantedDevice>&,
                    const std::vector<WantedDevice>& devices) override {
    ++grants;
    GrantReport r;
    r.method = "fake";
    for (const auto& d : devices) {
      if (refused.count(d.dev)) {
        r.devices.push_back({d, errno_error(EPERM, "refused")});
      } else {
        allowed[dir].insert(d.dev);
        r.devices.push_back({d, Status()});
      }
    }
    return r;
  }
};

}  // namespace gdw::test
