// Exposure before harm: which of a GPU container's wanted device nodes the next re-apply of
// its device policy would revoke. A runtime re-applying the OCI spec (runc/crun, v1 and v2)
// keeps only what linux.resources.devices allows (in order, the last matching rule wins);
// systemd re-applying the scope (daemon-reload, systemd cgroup driver) keeps only its
// DeviceAllow= list. A wanted node either of them lacks is exposed: fine now, gone at the
// next re-apply (until gpu-devwatch repairs it). Fixing it (passDeviceSpecs, CDI) makes the
// number fall.
//
// compute_exposure() and the unit-file parser are pure; read_scope_device_allow() reads
// systemd's runtime unit files (host-written, small, on tmpfs).
#pragma once

#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "core/desired_state.h"
#include "core/model.h"
#include "core/result.h"
#include "runtime/oci_config.h"

namespace gdw {

// One DeviceAllow= entry: "/dev/char/195:0", "/dev/nvidia0", "char-nvidia" (a glob on
// /proc/devices names), with its access ("" in the unit means rwm).
struct DeviceAllowEntry {
  std::string device;
  std::uint8_t access = kAccessAll;
  bool operator==(const DeviceAllowEntry&) const = default;
};

// A scope's device policy as systemd applies it on a reload.
struct ScopeDeviceAllow {
  std::string device_policy = "auto";  // auto | closed | strict
  std::vector<DeviceAllowEntry> entries;
  std::vector<std::string> files;  // the unit files read, in order (for the report)
  bool operator==(const ScopeDeviceAllow&) const = default;
};

// Whether systemd restricts the scope's devices at all: DevicePolicy=auto without any
// DeviceAllow= entry allows everything (and a reload changes nothing).
bool scope_restricts_devices(const ScopeDeviceAllow& scope);

// Applies one unit file's or drop-in's DeviceAllow= and DevicePolicy= assignments, in order,
// to `into` (an empty DeviceAllow= resets the list, as in systemd). Other keys are ignored.
void apply_unit_text(std::string_view text, ScopeDeviceAllow& into);

// Whether systemd's program/rules built from `scope` allow `dev` with `access`. Paths other
// than /dev/char/M:m are matched through the inventory's device nodes (what systemd's stat()
// would find); an entry that matches nothing here allows nothing.
bool device_allow_allows(const ScopeDeviceAllow& scope, const Inventory& inventory, const DeviceNumber& dev,
                         std::uint8_t access);

// Reads <dir>/<unit> (the transient unit) and <dir>/<unit>.d/*.conf for each of `unit_dirs`
// (highest priority first: a drop-in name found in an earlier directory masks the same name
// in a later one; drop-ins apply sorted by name). An error when no file of the unit exists.
Result<ScopeDeviceAllow> read_scope_device_allow(const std::vector<std::string>& unit_dirs, const std::string& unit);

struct ExposedDevice {
  WantedDevice device;
  bool spec = false;          // linux.resources.devices does not allow it
  bool device_allow = false;  // the scope's DeviceAllow= does not allow it
  bool operator==(const ExposedDevice&) const = default;
};

struct Exposure {
  std::vector<ExposedDevice> exposed;  // in `wanted` order
  // systemd driver: whether DeviceAllow= was read, and why not when it was not.
  bool device_allow_checked = false;
  std::string device_allow_problem;
  bool operator==(const Exposure&) const = default;
};

// `device_allow`: the scope's list (systemd driver), nullptr for cgroupfs; `scope_problem`
// says why it is unknown where it should have been read (the spec is still judged).
Exposure compute_exposure(const std::vector<WantedDevice>& wanted, const std::vector<OciDeviceCgroupRule>& spec_rules,
                          const ScopeDeviceAllow* device_allow, const Inventory& inventory,
                          const std::string& scope_problem = "");

// The wanted devices the scope's DeviceAllow= lacks (what a daemon-reload would revoke);
// nullopt when DeviceAllow= was not read (cgroupfs driver, or unreadable unit files).
std::optional<std::vector<WantedDevice>> device_allow_lacks(const Exposure& exposure);

// "spec", "DeviceAllow" or "spec+DeviceAllow": which re-apply would revoke it.
std::string exposure_reason(const ExposedDevice& d);

}  // namespace gdw
