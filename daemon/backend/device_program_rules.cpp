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
  return program.code.allows(want.dev, want.access) != Verdict::kAllow;
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

ProgramCounts count_by_owner(const std::vector<AttachedDeviceProgram>& programs) {
  ProgramCounts counts;
  for (const auto& p : programs) ++counts[p.owner];
  return counts;
}

ProgramCounts DeviceProgramsSnapshot::count_by_owner() const {
  ProgramCounts counts;
  for (const auto& cg : cgroups)
    for (const auto& p : cg.programs) ++counts[p.owner];
  return counts;
}

std::vector<WantedDevice> DeviceProgramsSnapshot::denied(const std::vector<WantedDevice>& wanted) const {
  std::vector<WantedDevice> out;
  for (const auto& want : wanted) {
    const bool denies = std::any_of(cgroups.begin(), cgroups.end(), [&](const Cgroup& cg) {
      return std::any_of(cg.programs.begin(), cg.programs.end(),
                         [&](const AttachedDeviceProgram& p) { return program_denies(p, want); });
    });
    if (denies) out.push_back(want);
  }
  return out;
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
  if (&a == &b) return true;  // one shared copy (SharedBpfCode)
  return a.size() == b.size() && std::equal(a.begin(), a.end(), b.begin(), [](const bpf_insn& x, const bpf_insn& y) {
           return x.code == y.code && x.dst_reg == y.dst_reg && x.src_reg == y.src_reg && x.off == y.off &&
                  x.imm == y.imm;
         });
}

// The replacement in this plan of another program with `p`'s instructions in the same
// cgroup, if any.
V2Plan::Replacement* replaced_alike(const AttachedDeviceProgram& p, std::vector<V2Plan::Replacement>& replacing) {
  for (auto& r : replacing)
    if (r.old.subgroup == p.subgroup && same_code(r.old.inner, p.inner)) return &r;
  return nullptr;
}

// A wrapper of ours attached after `w` (later in the kernel's order) in the same cgroup,
// running the same instructions and adding the same devices.
bool superseded(const AttachedDeviceProgram& w, std::size_t at, const std::vector<AttachedDeviceProgram>& attached) {
  for (std::size_t i = at + 1; i < attached.size(); ++i) {
    const auto& later = attached[i];
    if (later.wrapper && later.subgroup == w.subgroup && same_devices(later.added, w.added) &&
        same_code(later.inner, w.inner))
      return true;
  }
  return false;
}

}  // namespace

void leave_newcomers(V2Plan& plan, std::uint32_t newest_seen_first) {
  auto newcomer = [&](const AttachedDeviceProgram& p) { return p.id > newest_seen_first; };
  std::erase_if(plan.replace, [&](const V2Plan::Replacement& r) { return newcomer(r.old); });
  for (auto& r : plan.replace) std::erase_if(r.twins, newcomer);
}

V2Plan plan_v2_repair(const std::vector<AttachedDeviceProgram>& attached, const std::vector<WantedDevice>& wanted) {
  V2Plan plan;
  for (std::size_t i = 0; i < attached.size(); ++i) {
    const auto& p = attached[i];
    const bool denies =
        std::any_of(wanted.begin(), wanted.end(), [&](const WantedDevice& w) { return program_denies(p, w); });
    if (!denies) {
      if (p.wrapper && !p.link && superseded(p, i, attached)) plan.detach.push_back(p);
      continue;
    }
    if (p.link) {
      plan.leave.push_back({p, "attached through a bpf_link: only its link can detach it"});
    } else if (p.inner.empty()) {
      plan.leave.push_back({p, "cannot be wrapped: " + (p.unwrappable.empty() ? "no code" : p.unwrappable)});
    } else if (auto* twin = replaced_alike(p, plan.replace)) {
      twin->twins.push_back(p);
    } else {
      plan.replace.push_back({p, wanted, {}});
    }
  }
  return plan;
}

}  // namespace gdw
