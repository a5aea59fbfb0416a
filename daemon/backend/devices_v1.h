// cgroup v1 devices controller: read what a cgroup allows (devices.list), grant rules
// (devices.allow). One rule per write(), as the kernel requires.
#pragma once

#include <string>
#include <vector>

#include "core/device_rule.h"
#include "core/result.h"

namespace gdw {

// The raw text of <cgroup_dir>/devices.list. Errors carry errno as their code, so callers
// can tell a removed cgroup (ENOENT/ENODEV, is_cgroup_gone) from a real failure.
Result<std::string> read_devices_list(const std::string& cgroup_dir);

// One outcome per rule, in order: written, or an error whose code is the errno (EPERM: the
// kernel refused, a parent denies; ENOENT/ENODEV: the cgroup is gone).
std::vector<Status> write_device_grants(const std::string& cgroup_dir, const std::vector<DeviceRule>& rules);

// What a refused grant's errno means here.
std::string describe_grant_error(int err);

}  // namespace gdw
