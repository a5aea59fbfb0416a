// Checking and repairing one container's v1 device cgroup: read devices.list, compare
// with what it must have, grant the difference. Shared by `check --repair` and the daemon.
#pragma once

#include <string>
#include <vector>

#include "backend/devices_v1.h"
#include "core/desired_state.h"

namespace gdw {

struct V1Check {
  int read_err = 0;       // errno reading devices.list (0 = read)
  std::string parse_error;  // devices.list did not parse
  std::vector<WantedDevice> missing;
  bool ok() const { return read_err == 0 && parse_error.empty(); }
};

V1Check check_v1(const std::string& cgroup_dir, const DesiredDevices& desired);

struct V1Grant {
  WantedDevice device;
  int err = 0;  // 0 = written
};
// Writes one allow rule per missing device. Never `a`, never more than `missing`.
std::vector<V1Grant> grant_v1(const std::string& cgroup_dir, const std::vector<WantedDevice>& missing);

std::string describe_grant_error(int err);

}  // namespace gdw
