// The pure half of device_programs_v2.h: rule lists, their evaluation, and what attached
// programs deny. No syscalls here.
#include <algorithm>
#include <array>

#include "backend/device_programs_v2.h"

namespace gdw {
namespace {

struct BuiltinDevice {
  const char* path;  // nullptr: never deduplicated against linux.devices
  DeviceType type;
  std::uint32_t major;
  std::uint32_t minor;
  std::uint8_t access;
};

// runc's libcontainer/specconv AllowedDevices as of runc 1.2, in runc's order.
constexpr std::array<BuiltinDevice, 10> kRuncBuiltinDevices{{
    {nullptr, DeviceType::kChar, kAnyNumber, kAnyNumber, kAccessMknod},
    {nullptr, DeviceType::kBlock, kAnyNumber, kAnyNumber, kAccessMknod},
    {"/dev/null", DeviceType::kChar, 1, 3, kAccessAll},
    {"/dev/random", DeviceType::kChar, 1, 8, kAccessAll},
    {"/dev/full", DeviceType::kChar, 1, 7, kAccessAll},
    {"/dev/tty", DeviceType::kChar, 5, 0, kAccessAll},
    {"/dev/zero", DeviceType::kChar, 1, 5, kAccessAll},
    {"/dev/urandom", DeviceType::kChar, 1, 9, kAccessAll},
    {nullptr, DeviceType::kChar, 136, kAnyNumber, kAccessAll},  // /dev/pts/*
    {nullptr, DeviceType::kChar, 5, 2, kAccessAll},             // /dev/ptmx
}};
// Up to runc 1.1 the list ended with tun/tap.
constexpr BuiltinDevice kRuncTunTap{nullptr, DeviceType::kChar, 10, 200, kAccessAll};

bool rule_matches(const DeviceRule& rule, const DeviceNumber& dev, std::uint8_t access) {
  if (rule.type != DeviceType::kAll && rule.type != dev.type) return false;
  if (rule.major != kAnyNumber && rule.major != dev.major) return false;
  if (rule.minor != kAnyNumber && rule.minor != dev.minor) return false;
  return (access & ~rule.access) == 0;
}

}  // namespace

std::string to_string(ProgramOwner o) {
  switch (o) {
    case ProgramOwner::kOurs:
      return "ours";
    case ProgramOwner::kSystemd:
      return "systemd";
    case ProgramOwner::kRuntime:
      return "runtime";
  }
  return "runtime";
}

std::vector<OciDeviceCgroupRule> runc_enforced_rules(const std::vector<OciDeviceCgroupRule>& resources_devices,
                                                     const std::vector<OciLinuxDevice>& linux_devices,
                                                     RuncBuiltins builtins) {
  std::vector<BuiltinDevice> builtin_devices(kRuncBuiltinDevices.begin(), kRuncBuiltinDevices.end());
  if (builtins == RuncBuiltins::kRunc1_1) builtin_devices.push_back(kRuncTunTap);
  std::vector<OciDeviceCgroupRule> rules = resources_devices;
  for (const auto& builtin : builtin_devices) {
    // runc drops a built-in when the spec creates a node at the same path: the spec's own
    // resources rules then decide about that device.
    if (builtin.path != nullptr &&
        std::any_of(linux_devices.begin(), linux_devices.end(),
                    [&](const OciLinuxDevice& d) { return d.path == builtin.path; }))
      continue;
    rules.push_back({true, DeviceRule{builtin.type, builtin.major, builtin.minor, builtin.access}});
  }
  return rules;
}

std::vector<OciDeviceCgroupRule> union_rules(const std::vector<OciDeviceCgroupRule>& spec,
                                             const std::vector<WantedDevice>& desired) {
  std::vector<OciDeviceCgroupRule> rules = spec;
  rules.reserve(spec.size() + desired.size());
  for (const auto& want : desired)
    rules.push_back({true, DeviceRule{want.dev.type, want.dev.major, want.dev.minor, want.access}});
  return rules;
}

bool oci_rules_allow(const std::vector<OciDeviceCgroupRule>& rules, const DeviceNumber& dev, std::uint8_t access) {
  for (auto it = rules.rbegin(); it != rules.rend(); ++it)
    if (rule_matches(it->rule, dev, access)) return it->allow;
  return false;
}

std::vector<WantedDevice> denied_by_programs(const std::vector<AttachedDeviceProgram>& attached,
                                             const std::vector<OciDeviceCgroupRule>& spec,
                                             const std::vector<WantedDevice>& desired) {
  std::vector<WantedDevice> denied;
  for (const auto& want : desired) {
    bool allowed = std::all_of(attached.begin(), attached.end(), [&](const AttachedDeviceProgram& p) {
      const auto& rules = p.owner == ProgramOwner::kOurs && p.rules ? *p.rules : spec;
      return oci_rules_allow(rules, want.dev, want.access);
    });
    if (!allowed) denied.push_back(want);
  }
  return denied;
}

}  // namespace gdw
