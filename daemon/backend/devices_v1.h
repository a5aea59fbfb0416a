// cgroup v1 devices controller: read what a cgroup allows (devices.list), grant rules
// (devices.allow). One rule per write(), as the kernel requires.
#pragma once

#include <string>
#include <vector>

#include "core/device_rule.h"
#include "core/result.h"

namespace gdw {

// The raw text of <cgroup_dir>/devices.list. Errors carry errno so callers can tell a
// removed cgroup (ENOENT/ENODEV) from a real failure.
struct DevicesListText {
  std::string text;
  int err = 0;  // 0 when read
};
DevicesListText read_devices_list(const std::string& cgroup_dir);

struct GrantOutcome {
  DeviceRule rule;
  int err = 0;  // 0 = written; EPERM = the kernel refused (a parent denies); ENOENT/ENODEV = cgroup gone
};
std::vector<GrantOutcome> write_device_grants(const std::string& cgroup_dir, const std::vector<DeviceRule>& rules);

// A cgroup that disappeared under us: quietly dropped by callers, not an error.
bool is_cgroup_gone(int err);

}  // namespace gdw
