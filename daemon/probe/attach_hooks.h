// What the kernel allows of the attach hook's kinds (core/attach_hook_choice.h), asked
// before the probe's object is loaded so that a kind the kernel refuses costs no load of
// the whole object: whether bpf is in the active LSM list, and whether a BPF trampoline
// program (lsm/bpf, fexit on cgroup_bpf_prog_attach) loads at all. Each answer is a
// refusal in words an operator can act on; empty when the kind may be tried.
#pragma once

#include <string>
#include <string_view>

#include "core/attach_hook_choice.h"

namespace gdw {

inline constexpr const char* kActiveLsmList = "/sys/kernel/security/lsm";

// From the active LSM list's text ("lockdown,capability,yama,bpf"): empty when bpf is in it.
std::string lsm_list_refusal(std::string_view active_list);
// The same, read from securityfs (`path`).
std::string lsm_bpf_refusal(const std::string& path = kActiveLsmList);
// Loads (and closes) a two-instruction program of `kind` (kLsm on security_bpf's BPF LSM
// hook, kFexit on cgroup_bpf_prog_attach) against the kernel's BTF: empty when the kernel
// takes it. Other kinds: empty.
std::string trampoline_refusal(AttachHookKind kind);
// The same for an fexit program on the kernel function `function` (the write path hook:
// devcgroup_access_write).
inline constexpr const char* kRuleWritePath = "devcgroup_access_write";
std::string fexit_refusal(const char* function);

}  // namespace gdw
