// The pure half of device_programs_v2.h: what attached programs deny, and the repair plan.
// No syscalls here.
#include <algorithm>

#include "backend/device_programs_v2.h"

namespace gdw {
namespace {

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

bool oci_rules_allow(const std::vector<OciDeviceCgroupRule>& rules, const DeviceNumber& dev, std::uint8_t access) {
  for (auto it = rules.rbegin(); it != rules.rend(); ++it)
    if (rule_matches(it->rule, dev, access)) return it->allow;
  return false;
}

bool program_denies(const AttachedDeviceProgram& program, const WantedDevice& want) {
  if (program.code.empty()) return true;
  return program_allows(program.code, want.dev, want.access) != Verdict::kAllow;
}

std::vector<WantedDevice> denied_by_programs(const std::vector<AttachedDeviceProgram>& attached,
                                             const std::vector<WantedDevice>& wanted) {
  std::vector<WantedDevice> denied;
  for (const auto& want : wanted)
    if (std::any_of(attached.begin(), attached.end(),
                    [&](const AttachedDeviceProgram& p) { return program_denies(p, want); }))
      denied.push_back(want);
  return denied;
}

V2Plan plan_v2_repair(const std::vector<AttachedDeviceProgram>& attached, const std::vector<WantedDevice>& wanted) {
  V2Plan plan;
  for (const auto& p : attached) {
    if (std::none_of(wanted.begin(), wanted.end(), [&](const WantedDevice& w) { return program_denies(p, w); }))
      continue;
    if (p.link) {
      plan.leave.push_back({p, "attached through a bpf_link: only its link can detach it"});
    } else if (p.inner.empty()) {
      plan.leave.push_back({p, "cannot be wrapped: " + (p.unwrappable.empty() ? "no code" : p.unwrappable)});
    } else {
      plan.replace.push_back({p, wrap_device_program(wanted, p.inner)});
    }
  }
  return plan;
}

}  // namespace gdw
