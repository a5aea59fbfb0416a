#include "node/v1_repair.h"

#include <cerrno>
#include <cstring>

namespace gdw {

V1Check check_v1(const std::string& cgroup_dir, const DesiredDevices& desired) {
  V1Check c;
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

std::vector<V1Grant> grant_v1(const std::string& cgroup_dir, const std::vector<WantedDevice>& missing) {
  auto outcomes = write_device_grants(cgroup_dir, grant_rules(missing));
  std::vector<V1Grant> grants;
  grants.reserve(missing.size());
  for (std::size_t i = 0; i < missing.size(); ++i) grants.push_back(V1Grant{missing[i], outcomes[i].err});
  return grants;
}

std::string describe_grant_error(int err) {
  if (err == 0) return "granted";
  if (err == EPERM) return "refused by the kernel (a parent cgroup denies this device)";
  if (is_cgroup_gone(err)) return "cgroup removed";
  return std::strerror(err);
}

}  // namespace gdw
