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

namespace {

bool same_devices(const std::vector<WantedDevice>& a, const std::vector<WantedDevice>& b) {
  auto covered = [](const std::vector<WantedDevice>& x, const std::vector<WantedDevice>& y) {
    return std::all_of(x.begin(), x.end(), [&](const WantedDevice& d) {
      return std::any_of(y.begin(), y.end(), [&](const WantedDevice& e) { return e.dev == d.dev && e.access == d.access; });
    });
  };
  return covered(a, b) && covered(b, a);
}

bool same_code(const BpfCode& a, const BpfCode& b) {
  return a.size() == b.size() && std::equal(a.begin(), a.end(), b.begin(), [](const bpf_insn& x, const bpf_insn& y) {
           return x.code == y.code && x.dst_reg == y.dst_reg && x.src_reg == y.src_reg && x.off == y.off &&
                  x.imm == y.imm;
         });
}

// A wrapper of ours in the same cgroup that runs `p`'s instructions and adds exactly
// `wanted`: attached already, or about to replace another program with those instructions
// (the kernel attaches one program only once per cgroup).
bool wrapped_beside(const AttachedDeviceProgram& p, const std::vector<AttachedDeviceProgram>& attached,
                    const std::vector<V2Plan::Replacement>& replacing, const std::vector<WantedDevice>& wanted) {
  const bool attached_already = std::any_of(attached.begin(), attached.end(), [&](const AttachedDeviceProgram& w) {
    return w.wrapper && w.id != p.id && w.subgroup == p.subgroup && same_devices(w.added, wanted) &&
           same_code(w.inner, p.inner);
  });
  return attached_already || std::any_of(replacing.begin(), replacing.end(), [&](const V2Plan::Replacement& r) {
           return r.old.subgroup == p.subgroup && same_code(r.old.inner, p.inner);
         });
}

}  // namespace

V2Plan plan_v2_repair(const std::vector<AttachedDeviceProgram>& attached, const std::vector<WantedDevice>& wanted) {
  V2Plan plan;
  for (const auto& p : attached) {
    if (std::none_of(wanted.begin(), wanted.end(), [&](const WantedDevice& w) { return program_denies(p, w); }))
      continue;
    if (p.link) {
      plan.leave.push_back({p, "attached through a bpf_link: only its link can detach it"});
    } else if (p.inner.empty()) {
      plan.leave.push_back({p, "cannot be wrapped: " + (p.unwrappable.empty() ? "no code" : p.unwrappable)});
    } else if (wrapped_beside(p, attached, plan.replace, wanted)) {
      plan.detach.push_back(p);
    } else {
      plan.replace.push_back({p, wanted});
    }
  }
  return plan;
}

}  // namespace gdw
