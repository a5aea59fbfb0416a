#include "probe/attach_hooks.h"

#include <bpf/bpf.h>
#include <bpf/btf.h>
#include <linux/bpf.h>
#include <unistd.h>

#include <cerrno>
#include <fstream>
#include <sstream>

#include "core/result.h"

namespace gdw {

std::string lsm_list_refusal(std::string_view active_list) {
  std::string_view rest = active_list;
  while (!rest.empty()) {
    const auto comma = rest.find(',');
    std::string_view name = rest.substr(0, comma);
    while (!name.empty() && (name.back() == '\n' || name.back() == ' ')) name.remove_suffix(1);
    if (name == "bpf") return "";
    if (comma == std::string_view::npos) break;
    rest.remove_prefix(comma + 1);
  }
  std::string list(active_list);
  while (!list.empty() && list.back() == '\n') list.pop_back();
  return "bpf is not in the active LSM list (" + (list.empty() ? std::string("empty") : list) +
         "; the kernel command line's lsm= would add it)";
}

std::string lsm_bpf_refusal(const std::string& path) {
  std::ifstream in(path);
  if (!in) {
    return "the active LSM list cannot be read (" + path + ": " + errno_text(errno) +
           "; securityfs not mounted?)";
  }
  std::ostringstream text;
  text << in.rdbuf();
  return lsm_list_refusal(text.str());
}

namespace {

struct Target {
  const char* function;  // in the kernel's BTF
  bpf_prog_type type;
  bpf_attach_type attach;
};

}  // namespace

namespace {

std::string trial_load(const Target& target, bool lsm) {
  btf* vmlinux = btf__load_vmlinux_btf();
  if (!vmlinux) return "the kernel's BTF cannot be read: " + errno_text(errno);
  const int id = btf__find_by_name_kind(vmlinux, target.function, BTF_KIND_FUNC);
  btf__free(vmlinux);
  if (id < 0) {
    return std::string("the kernel has no ") + target.function +
           (lsm ? " (built without CONFIG_BPF_LSM)" : " (or it is inlined)");
  }
  const bpf_insn insns[] = {
      {BPF_ALU64 | BPF_MOV | BPF_K, BPF_REG_0, 0, 0, 0},  // r0 = 0
      {BPF_JMP | BPF_EXIT, 0, 0, 0, 0},
  };
  LIBBPF_OPTS(bpf_prog_load_opts, opts, .expected_attach_type = target.attach,
              .attach_btf_id = static_cast<__u32>(id));
  const int fd = bpf_prog_load(target.type, "gdw_hook_probe", "GPL", insns, 2, &opts);
  if (fd >= 0) {
    ::close(fd);
    return "";
  }
  const int err = errno;
  if (err == EPERM) return "the kernel refuses BPF trampoline programs here (EPERM at load)";
  return "a trampoline program on " + std::string(target.function) + " does not load: " + errno_text(err);
}

}  // namespace

std::string trampoline_refusal(AttachHookKind kind) {
  if (kind == AttachHookKind::kLsm) return trial_load({"bpf_lsm_bpf", BPF_PROG_TYPE_LSM, BPF_LSM_MAC}, true);
  if (kind == AttachHookKind::kFexit) return fexit_refusal("cgroup_bpf_prog_attach");
  return "";
}

std::string fexit_refusal(const char* function) {
  return trial_load({function, BPF_PROG_TYPE_TRACING, BPF_TRACE_FEXIT}, false);
}

}  // namespace gdw
