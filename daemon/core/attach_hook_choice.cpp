#include "core/attach_hook_choice.h"

namespace gdw {

std::string_view to_string(AttachHookKind kind) {
  switch (kind) {
    case AttachHookKind::kLsm: return "lsm";
    case AttachHookKind::kFexit: return "fexit";
    case AttachHookKind::kKmalloc: return "kmalloc";
    case AttachHookKind::kCapability: return "capability";
  }
  return "?";
}

std::string_view hook_point(AttachHookKind kind) {
  switch (kind) {
    case AttachHookKind::kLsm: return "lsm/bpf";
    case AttachHookKind::kFexit: return "fexit/cgroup_bpf_prog_attach";
    case AttachHookKind::kKmalloc: return "tp_btf/kmalloc";
    case AttachHookKind::kCapability: return "tp_btf/cap_capable";
  }
  return "?";
}

AttachHookChoice choose_attach_hook(const AttachHookRefusals& refusals) {
  AttachHookChoice choice;
  for (AttachHookKind kind : kAttachHookKinds) {
    const std::string& why = refusal_of(refusals, kind);
    if (why.empty()) {
      choice.chosen = kind;
      return choice;
    }
    choice.refused.emplace_back(kind, why);
  }
  return choice;
}

std::string AttachHookChoice::describe() const {
  std::string s = chosen ? std::string(hook_point(*chosen)) : std::string("none");
  if (refused.empty()) return s;
  s += " (";
  for (std::size_t i = 0; i < refused.size(); ++i) {
    if (i) s += "; ";
    s += std::string(hook_point(refused[i].first)) + " refused: " + refused[i].second;
  }
  return s + ")";
}

}  // namespace gdw
