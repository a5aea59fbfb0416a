// Which way the probe sees device program attaches (cgroup v2): the attach hook's kinds,
// cheapest first for the rest of the node, and the fallback without one. Chosen at start
// from what the kernel allowed (pure: the table of refusals comes from the probe loader,
// daemon/probe/attach_hooks.h):
//  - lsm/bpf, where bpf is in the active LSM list: every bpf() call passes it, nothing
//    else does; it sees the attach at the call's start, before the kernel installs it.
//  - fexit on the cgroup attach path (cgroup_bpf_prog_attach, cgroup_bpf_link_attach),
//    where the kernel allows BPF trampolines: only cgroup attaches pass it, after the kernel
//    installed them.
//  - tp_btf/kmalloc: every kmalloc of the node passes it (returning at a comparison of its
//    call site), while the kernel installs the attach.
//  - the capability trigger: a device program's load (its CAP_BPF check, tp_btf/cap_capable
//    from 6.14), after which the GPU containers' programs are read again 1 ms to 1 s later.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace gdw {

enum class AttachHookKind : std::uint8_t { kLsm, kFexit, kKmalloc, kCapability };
// In the order they are tried.
inline constexpr AttachHookKind kAttachHookKinds[] = {AttachHookKind::kLsm, AttachHookKind::kFexit,
                                                      AttachHookKind::kKmalloc, AttachHookKind::kCapability};
// The metric label: "lsm", "fexit", "kmalloc", "capability".
std::string_view to_string(AttachHookKind kind);
// Where it hooks, for a person: "lsm/bpf", "fexit/cgroup_bpf_prog_attach", ...
std::string_view hook_point(AttachHookKind kind);

// Per kind (indexed by the enum), why the kernel or the configuration refused it; empty:
// it loaded and attached.
using AttachHookRefusals = std::array<std::string, std::size(kAttachHookKinds)>;
inline std::string& refusal_of(AttachHookRefusals& r, AttachHookKind k) { return r[static_cast<std::size_t>(k)]; }
inline const std::string& refusal_of(const AttachHookRefusals& r, AttachHookKind k) {
  return r[static_cast<std::size_t>(k)];
}

struct AttachHookChoice {
  std::optional<AttachHookKind> chosen;  // nullopt: none (the periodic query, the syscall hook)
  // The kinds tried before it (all, when none), with why each was refused.
  std::vector<std::pair<AttachHookKind, std::string>> refused;
  // "lsm/bpf", or "tp_btf/kmalloc (lsm/bpf refused: ...; fexit/... refused: ...)".
  std::string describe() const;
};
// The first kind in kAttachHookKinds order that was not refused.
AttachHookChoice choose_attach_hook(const AttachHookRefusals& refusals);

}  // namespace gdw
