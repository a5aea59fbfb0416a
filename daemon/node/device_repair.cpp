#include "node/device_repair.h"

#include <cerrno>
#include <unistd.h>

#include <cstring>

namespace gdw {

DeviceCheck check_v1(const std::string& cgroup_dir, const DesiredDevices& desired) {
  DeviceCheck c;
  auto raw = read_devices_list(cgroup_dir);
  c.read_err = raw.err;
  if (raw.err) return c;
  auto list = parse_devices_list(raw.text);
  if (!list) {
    c.parse_error = list.error().message;
    return c;
  }
  c.missing = missing_devices(desired, *list);
  return c;
}

std::vector<DeviceGrant> grant_v1(const std::string& cgroup_dir, const std::vector<WantedDevice>& missing) {
  auto outcomes = write_device_grants(cgroup_dir, grant_rules(missing));
  std::vector<DeviceGrant> grants;
  grants.reserve(missing.size());
  for (std::size_t i = 0; i < missing.size(); ++i) grants.push_back(DeviceGrant{missing[i], outcomes[i].err, {}});
  return grants;
}

std::string describe_grant_error(int err) {
  if (err == 0) return "granted";
  if (err == EPERM) return "refused by the kernel (a parent cgroup denies this device)";
  if (is_cgroup_gone(err)) return "cgroup removed";
  return std::strerror(err);
}

DeviceCheck check_v2(const std::string& cgroup_dir, const DesiredDevices& desired) {
  DeviceCheck c;
  auto programs = query_device_programs(cgroup_dir);
  if (!programs) {
    // The query's error names the cgroup; a vanished cgroup is told apart by the directory.
    if (::access(cgroup_dir.c_str(), F_OK) != 0) {
      c.read_err = ENOENT;
    } else {
      c.parse_error = programs.error().message;
    }
    return c;
  }
  c.programs = std::move(*programs);
  c.missing = denied_by_programs(c.programs, desired.wanted);
  return c;
}

Result<V2Repair> repair_v2(const std::string& cgroup_dir, const std::vector<WantedDevice>& wanted) {
  return repair_device_programs(cgroup_dir, wanted);
}

}  // namespace gdw
