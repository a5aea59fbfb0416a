// Checking and repairing one container's device policy, shared by `check --repair` and the
// daemon. cgroup v1: read devices.list, grant the difference to devices.allow. cgroup v2:
// run the attached device programs' code; wrap the ones that deny a wanted device.
#pragma once

#include <string>
#include <vector>

#include "backend/device_programs_v2.h"
#include "backend/devices_v1.h"
#include "core/config.h"
#include "runtime/bundles.h"
#include "core/desired_state.h"

namespace gdw {

struct DeviceCheck {
  int read_err = 0;         // errno reading devices.list / querying programs (0 = read)
  std::string parse_error;  // devices.list did not parse, or the query failed otherwise
  std::vector<WantedDevice> missing;
  std::vector<AttachedDeviceProgram> programs;  // v2: what is attached to the cgroup
  bool ok() const { return read_err == 0 && parse_error.empty(); }
};

DeviceCheck check_v1(const std::string& cgroup_dir, const DesiredDevices& desired);

struct DeviceGrant {
  WantedDevice device;
  int err = 0;        // 0 = written
  std::string error;  // set when the failure is not one errno (a v2 program replacement)
};
// Writes one allow rule per missing device. Never `a`, never more than `missing`.
std::vector<DeviceGrant> grant_v1(const std::string& cgroup_dir, const std::vector<WantedDevice>& missing);

std::string describe_grant_error(int err);

// cgroup v2: the wanted devices some attached program denies, decided by running each
// program's own instructions (device_programs_v2.h).
DeviceCheck check_v2(const std::string& cgroup_dir, const DesiredDevices& desired);
// Wraps each program that denies a wanted device so that it allows the wanted devices and
// decides as before for everything else; the other programs stay. No-op when none denies.
Result<V2Repair> repair_v2(const std::string& cgroup_dir, const std::vector<WantedDevice>& wanted);

}  // namespace gdw
