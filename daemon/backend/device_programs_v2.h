// cgroup v2 device policy: BPF_CGROUP_DEVICE programs attached to a container's cgroup.
// All effective programs must allow an access (results are ANDed), so an extra "allow GPU"
// program grants nothing: a grant means replacing the denying program(s) with one program
// that allows the union of the container's OCI spec rules and its desired GPU nodes —
// the same semantics as runc's own filter — without a window where the container loses a
// device it had, and never ending with fewer restrictions than the spec.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "core/desired_state.h"
#include "core/result.h"
#include "runtime/oci_config.h"

namespace gdw {

enum class ProgramOwner { kOurs, kSystemd, kRuntime };
std::string to_string(ProgramOwner o);  // "ours", "systemd", "runtime"

struct AttachedDeviceProgram {
  std::uint32_t id = 0;
  std::string name;  // bpf_prog_info.name (systemd: "sd_devices"; ours: kOurProgramName; runc: "")
  ProgramOwner owner = ProgramOwner::kRuntime;
  bool link = false;  // attached through a bpf_link (only its link can detach it)
  // Ours only: the rule list the program enforces, read back from its .rodata map; nullopt
  // when it could not be read (or for programs of others).
  std::optional<std::vector<OciDeviceCgroupRule>> rules;
};

// The name our programs carry (bpf_prog_info.name holds 15 characters).
inline constexpr const char* kOurProgramName = "gdw_devices";
// The most rules one program of ours holds (bpf/device_filter.h).
inline constexpr std::size_t kMaxProgramRules = 256;

// Programs attached directly to the cgroup directory (not inherited ones), in the kernel's
// order. Link-attached ones are recognised by walking the system's bpf links (libbpf 1.1
// has no link ids in bpf_prog_query).
Result<std::vector<AttachedDeviceProgram>> query_device_programs(const std::string& cgroup_dir);

// runc's built-in allowed devices changed once: runc 1.0 and 1.1 also allow tun/tap
// (c 10:200 rwm); runc 1.2 dropped it.
enum class RuncBuiltins { kRunc1_1, kRunc1_2 };

// What runc compiles into its program for a spec: linux.resources.devices in order, then
// runc's built-in allowed devices (mknod of any char/block device, /dev/null, zero, full,
// random, urandom, tty, ptmx, pts, and tun up to 1.1), except a built-in whose path
// linux.devices also names. Pass this, not the bare resources list, as `spec` below:
// without the built-ins a replacement program would take /dev/null and the terminals from
// the container (and, with the wrong runc generation, grant or revoke tun).
std::vector<OciDeviceCgroupRule> runc_enforced_rules(const std::vector<OciDeviceCgroupRule>& resources_devices,
                                                     const std::vector<OciLinuxDevice>& linux_devices,
                                                     RuncBuiltins builtins);

// The rules our program enforces: the spec's rules in order, then an allow for each desired
// device. Last matching rule wins; no match denies (runc's semantics).
std::vector<OciDeviceCgroupRule> union_rules(const std::vector<OciDeviceCgroupRule>& spec,
                                             const std::vector<WantedDevice>& desired);

// Does the ordered rule list allow `dev` with `access` (runc's filter semantics)?
bool oci_rules_allow(const std::vector<OciDeviceCgroupRule>& rules, const DeviceNumber& dev, std::uint8_t access);

// The desired devices that the programs attached to a container's cgroup deny, without
// touching the container. Every program must allow (ANDed). Ours is judged by the rules
// read back from it (one whose rules could not be read counts as enforcing `spec`); any
// other program is ASSUMED to enforce `spec` (runc_enforced_rules): runc compiles it from
// the spec, and systemd from the DeviceAllow= list runc derived from it. A cgroup without
// programs denies nothing here (programs inherited from ancestors are not looked at).
std::vector<WantedDevice> denied_by_programs(const std::vector<AttachedDeviceProgram>& attached,
                                             const std::vector<OciDeviceCgroupRule>& spec,
                                             const std::vector<WantedDevice>& desired);

struct UndetachedProgram {
  AttachedDeviceProgram program;
  std::string reason;  // "attached through a bpf_link", or the errno text of the detach
};

struct V2Repair {
  std::uint32_t attached_id = 0;              // our new program
  std::vector<std::uint32_t> detached_ids;    // programs it replaced
  bool used_replace = false;                  // BPF_F_REPLACE (atomic) rather than attach-then-detach
  // Programs still attached beside ours: the container may still be denied what they deny
  // (check with denied_by_programs on a fresh query).
  std::vector<UndetachedProgram> left_attached;
};

// Installs union_rules(spec, desired) on the cgroup: BPF_F_REPLACE when exactly one program
// is attached (and it is not link-attached), else attach ours (BPF_F_ALLOW_MULTI) then
// detach every other program — our own older ones too — that can be detached; nothing is
// detached before ours is attached. Our program stays attached after this process exits
// (the repair must outlive the daemon). On a cgroup without device programs it restricts
// the container to the union: call it only where denied_by_programs reports a denial.
// Errors: more than kMaxProgramRules rules, a load the verifier rejects, a cgroup whose
// programs were attached without BPF_F_ALLOW_MULTI (or whose ancestor forbids attaching),
// or a failed attach; each names the cgroup and the errno text.
Result<V2Repair> install_union_program(const std::string& cgroup_dir, const std::vector<OciDeviceCgroupRule>& spec,
                                       const std::vector<WantedDevice>& desired);

}  // namespace gdw
