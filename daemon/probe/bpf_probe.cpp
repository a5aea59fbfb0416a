// gdw::Probe on the devwatch skeleton (bpf/devwatch.bpf.c), its loading side: the object
// loaded with the attach hook's kinds the kernel allows (probe/attach_hooks.h), the
// always-on programs attached, and the hooks attached and detached as the node needs
// them (tp_btf programs attached by BTF id, no tracefs needed; lsm and fexit programs
// where allowed). The ring buffers and maps: bpf_probe_maps.cpp.
#include <bpf/bpf.h>
#include <bpf/btf.h>
#include <bpf/libbpf.h>
#include <fcntl.h>
#include <malloc.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <exception>
#include <optional>
#include <string_view>
#include <vector>

#include "devwatch.skel.h"
#include "devwatch_events.h"
#include "probe/attach_hooks.h"
#include "probe/bpf_probe_impl.h"
#include "probe/libbpf_log.h"
#include "probe/probe.h"
#include "probe/probe_records.h"

namespace gdw::probe_detail {
namespace {

constexpr const char* kKernelBtf = "/sys/kernel/btf/vmlinux";

// Whether the running kernel has the cap_capable tracepoint (added in 6.14).
bool kernel_has_cap_capable_tracepoint() {
  btf* vmlinux = btf__load_vmlinux_btf();
  if (!vmlinux) return false;
  bool found = btf__find_by_name_kind(vmlinux, "btf_trace_cap_capable", BTF_KIND_TYPEDEF) >= 0;
  btf__free(vmlinux);
  return found;
}


// The programs attached apart: the syscall hook (on demand), the attach hook's pair and
// the capability hook (as the node's device policy needs them: focus()).
bool attached_apart(const devwatch* skeleton, const bpf_program* program) {
  return program == skeleton->progs.gdw_sys_exit || program == skeleton->progs.gdw_effective_progs ||
         program == skeleton->progs.gdw_lookup_symbols || program == skeleton->progs.gdw_cap_check ||
         program == skeleton->progs.gdw_lsm_bpf || program == skeleton->progs.gdw_fexit_prog_attach ||
         program == skeleton->progs.gdw_fexit_link_attach || program == skeleton->progs.gdw_fentry_prog_load ||
         program == skeleton->progs.gdw_fexit_rule_write;
}

// The programs of an attach hook's kind (gdw_lookup_symbols goes with kmalloc, run once).
std::vector<bpf_program*> programs_of(const devwatch* skeleton, AttachHookKind kind) {
  switch (kind) {
    case AttachHookKind::kLsm: return {skeleton->progs.gdw_lsm_bpf};
    case AttachHookKind::kFexit:
      return {skeleton->progs.gdw_fexit_prog_attach, skeleton->progs.gdw_fexit_link_attach,
              skeleton->progs.gdw_fentry_prog_load};
    case AttachHookKind::kKmalloc: return {skeleton->progs.gdw_effective_progs, skeleton->progs.gdw_lookup_symbols};
    case AttachHookKind::kCapability: return {};
  }
  return {};
}

// The attach hook's kinds proper, in the order they are tried.
constexpr AttachHookKind kHookKinds[] = {AttachHookKind::kLsm, AttachHookKind::kFexit, AttachHookKind::kKmalloc};

}  // namespace

Status BpfProbe::attach_always_on() {
  bpf_program* program = nullptr;
  bpf_object__for_each_program(program, skeleton_->obj) {
    if (attached_apart(skeleton_, program) || !bpf_program__autoload(program)) continue;
    clear_libbpf_log();
    bpf_link* link = bpf_program__attach(program);
    if (!link) {
      return load_error("attaching probe program '" + std::string(bpf_program__name(program)) + "' (" +
                            bpf_program__section_name(program) + ")",
                        -errno);
    }
    links_.push_back(link);
  }
  return {};
}

void BpfProbe::prepare_attach_hook() {
  std::string& refused = refusal_of(refusals_, AttachHookKind::kKmalloc);
  if (!refused.empty() || !bpf_program__autoload(skeleton_->progs.gdw_effective_progs)) return;
  LIBBPF_OPTS(bpf_test_run_opts, run);
  if (bpf_prog_test_run_opts(bpf_program__fd(skeleton_->progs.gdw_lookup_symbols), &run) != 0) {
    refused = "looking up its call sites: " + errno_text(errno);
    return;
  }
  bool found = false;
  for (std::uint64_t site : skeleton_->bss->effective_progs_sites) found |= site != 0;
  if (!found) {
    refused = "none of its call sites (compute_effective_progs, update_effective_progs, "
              "bpf_prog_array_alloc) is in the kernel's symbols (kptr_restrict, lockdown?)";
  }
}

// Attaches `program` (as `link`) or destroys its link; nothing when already so. false:
// the attach failed, with errno set.
static bool set_link(bpf_link*& link, bpf_program* program, bool attached) {
  if (attached == (link != nullptr)) return true;
  if (!attached) {
    bpf_link__destroy(link);
    link = nullptr;
    return true;
  }
  clear_libbpf_log();
  link = bpf_program__attach(program);
  return link != nullptr;
}

bool BpfProbe::attach_kind(AttachHookKind kind) {
  if (attach_hook_kind_ == kind) return true;
  std::string& refused = refusal_of(refusals_, kind);
  if (!refused.empty()) return false;
  std::vector<bpf_link*> links;
  for (bpf_program* program : programs_of(skeleton_, kind)) {
    if (program == skeleton_->progs.gdw_lookup_symbols) continue;  // run once, never attached
    clear_libbpf_log();
    bpf_link* link = bpf_program__attach(program);
    if (!link) {
      // Not tried again on every focus.
      refused = load_error("attaching " + std::string(bpf_program__name(program)) + " (" +
                               bpf_program__section_name(program) + ")",
                           -errno)
                    .message;
      for (bpf_link* l : links) bpf_link__destroy(l);
      return false;
    }
    links.push_back(link);
  }
  detach_attach_hook();
  attach_hook_ = std::move(links);
  attach_hook_kind_ = kind;
  return true;
}

void BpfProbe::detach_attach_hook() {
  for (bpf_link* link : attach_hook_) bpf_link__destroy(link);
  attach_hook_.clear();
  attach_hook_kind_.reset();
}

AttachHookChoice BpfProbe::attach_hook_choice() const {
  AttachHookRefusals shown = refusals_;
  for (AttachHookKind kind : kHookKinds) {
    if (kind == attach_hook_kind_) {
      refusal_of(shown, kind).clear();
      break;
    }
    // Loaded, but not what is attached (a cgroup v1 node, or use_attach_hook()).
    if (refusal_of(shown, kind).empty()) refusal_of(shown, kind) = "not attached";
  }
  return choose_attach_hook(shown);
}

Status BpfProbe::use_attach_hook(AttachHookKind kind) {
  if (kind == AttachHookKind::kCapability) {
    detach_attach_hook();
    skeleton_->data->report_program_loads = true;
    return set_capability_hook(true);
  }
  if (!attach_kind(kind)) return Error{std::string(hook_point(kind)) + ": " + refusal_of(refusals_, kind)};
  skeleton_->data->report_program_loads = true;  // as focus() leaves it on programs
  return set_capability_hook(false);
}

Status BpfProbe::set_write_hook(bool attached) {
  if (!write_hook_refusal_.empty() || !bpf_program__autoload(skeleton_->progs.gdw_fexit_rule_write)) return {};
  if (set_link(write_hook_, skeleton_->progs.gdw_fexit_rule_write, attached)) return {};
  return load_error("attaching the write path hook (gdw_fexit_rule_write, fexit/devcgroup_access_write)", -errno);
}

Status BpfProbe::set_capability_hook(bool attached) {
  if (set_link(capability_hook_, skeleton_->progs.gdw_cap_check, attached)) return {};
  return load_error("attaching the capability hook (gdw_cap_check, tp_btf/cap_capable)", -errno);
}

// Each always-on hook costs unrelated system calls (the capability hook every mmap of
// writable memory, the attach hook every kmalloc), so a node pays only for the one its
// device policy needs. Wanted hooks are attached before unwanted ones are detached: no
// moment sees neither.
Status BpfProbe::focus(DevicePolicyForm form) {
  const bool attach_wanted = form != DevicePolicyForm::kRuleFiles;
  // The first kind the kernel takes; a refusal is kept (attach_hook_choice()): the probe
  // works on without it.
  if (attach_wanted && !attach_hook_kind_)
    for (AttachHookKind kind : kHookKinds)
      if (attach_kind(kind)) break;
  const bool attaches_seen = attach_hook_kind_.has_value();
  // Without the attach hook, a program load (its CAP_BPF check) is what cgroup v2 shows.
  const bool capability_wanted = (form != DevicePolicyForm::kPrograms || !attaches_seen) &&
                                 bpf_program__autoload(skeleton_->progs.gdw_cap_check);
  Status capability = capability_wanted ? set_capability_hook(true) : Status{};
  // Where the capability hook does not exist, rule writes on the write path (cgroup v1).
  Status write_path = set_write_hook(form != DevicePolicyForm::kPrograms);
  // With the attach hook, loads are reported only once focused on programs, at its own
  // load point (program_loads_ahead()): as loaded (kUnknown) the capability hook would
  // report every load on the node, for nothing.
  skeleton_->data->report_program_loads =
      form != DevicePolicyForm::kRuleFiles && (!attaches_seen || form == DevicePolicyForm::kPrograms);
  if (!attach_wanted) detach_attach_hook();
  if (!capability_wanted) (void)set_capability_hook(false);
  return capability ? write_path : capability;
}

Status BpfProbe::set_syscall_hook(bool attached) {
  if (attached == (syscall_hook_ != nullptr)) return {};
  // Detaching: first, a write passing its permission check from now on expects no exit report.
  if (!attached) skeleton_->bss->syscall_hook_attached = false;
  if (!set_link(syscall_hook_, skeleton_->progs.gdw_sys_exit, attached))
    return load_error("attaching the syscall hook (gdw_sys_exit, tp_btf/sys_exit)", -errno);
  // Attached: only now, since a write passing its permission check before this has no exit to be seen.
  if (attached) skeleton_->bss->syscall_hook_attached = true;
  return {};
}

namespace {

// The attach hook's kind whose program libbpf names in its log as the one that failed to
// load; nullopt when none of theirs is named.
std::optional<AttachHookKind> kind_that_failed(const devwatch* skeleton) {
  const auto log = libbpf_log_tail(64);
  for (AttachHookKind kind : kHookKinds)
    for (const bpf_program* program : programs_of(skeleton, kind))
      for (const auto& line : log)
        if (line.find("prog '" + std::string(bpf_program__name(program)) + "'") != std::string::npos) return kind;
  return std::nullopt;
}

// Before the object is loaded: the kinds options or the kernel rule out (a kind refused
// costs no load of the whole object).
AttachHookRefusals refusals_before_load(const ProbeOptions& options) {
  AttachHookRefusals refusals;
  for (AttachHookKind kind : kHookKinds) {
    std::string& refused = refusal_of(refusals, kind);
    if (!options.attach_hook) {
      refused = "turned off (probe.attach_hook: false)";
    } else if (options.attach_hook_kinds.count(kind) == 0) {
      refused = "not asked for";
    } else if (kind == AttachHookKind::kLsm) {
      refused = lsm_bpf_refusal();
      if (refused.empty()) refused = trampoline_refusal(kind);
    } else if (kind == AttachHookKind::kFexit) {
      refused = trampoline_refusal(kind);
    }
  }
  return refusals;
}

// Whether libbpf names the write path hook's program as the one that failed to load.
bool write_hook_failed(const devwatch* skeleton) {
  const std::string named = "prog '" + std::string(bpf_program__name(skeleton->progs.gdw_fexit_rule_write)) + "'";
  for (const auto& line : libbpf_log_tail(64))
    if (line.find(named) != std::string::npos) return true;
  return false;
}

// `write_hook_refusal`: why the write path hook is not loaded (empty: try it, if needed).
Result<std::unique_ptr<Probe>> load_with(const ProbeOptions& options, AttachHookRefusals refusals,
                                         std::string write_hook_refusal = "") {
  clear_libbpf_log();
  devwatch* skeleton = devwatch::open();
  if (!skeleton) return load_error("opening the BPF probe object", -errno);
  const bool no_capability_hook = !options.use_capability_tracepoint || !kernel_has_cap_capable_tracepoint();
  // Without it, rule writes on the devices controller's write path, where the kernel takes
  // an fexit program there.
  if (!no_capability_hook)
    write_hook_refusal.clear();
  else if (!options.write_path_hook && write_hook_refusal.empty())
    write_hook_refusal = "not asked for";
  else if (write_hook_refusal.empty())
    write_hook_refusal = fexit_refusal(kRuleWritePath);
  const bool write_hook = no_capability_hook && write_hook_refusal.empty();
  const bool rule_writes_need_hook = no_capability_hook && !write_hook;
  auto probe = std::make_unique<BpfProbe>(skeleton, rule_writes_need_hook, write_hook_refusal);
  skeleton->rodata->ignored_writer_tgid = options.ignored_writer_tgid;
  skeleton->rodata->report_allow_writes = options.report_allow_writes;
  bpf_program__set_autoload(skeleton->progs.gdw_fexit_rule_write, write_hook);
  if (no_capability_hook) {
    skeleton->rodata->rule_writes_at_syscall_exit = !write_hook;
    bpf_program__set_autoload(skeleton->progs.gdw_cap_check, false);
    refusal_of(refusals, AttachHookKind::kCapability) =
        options.use_capability_tracepoint ? "no cap_capable tracepoint (before 6.14)" : "not asked for";
  }
  for (AttachHookKind kind : kHookKinds)
    for (bpf_program* program : programs_of(skeleton, kind))
      bpf_program__set_autoload(program, refusal_of(refusals, kind).empty());
  clear_libbpf_log();
  if (int err = devwatch::load(skeleton); err != 0) {
    // The attach hook's kinds are what a kernel may refuse (bpf_kallsyms_lookup_name needs
    // 5.16 and CAP_PERFMON, trampolines a kernel that allows them): the rest of the probe
    // works without them. The one libbpf names is left out, else all of them.
    const std::string why = load_error("loading it", err).message;
    if (write_hook && write_hook_failed(skeleton)) {
      probe.reset();  // destroys the skeleton
      return load_with(options, refusals, why);
    }
    std::optional<AttachHookKind> failed = kind_that_failed(skeleton);
    bool any_loaded = false;
    for (AttachHookKind kind : kHookKinds) any_loaded |= refusal_of(refusals, kind).empty();
    if (!any_loaded) return load_error("loading the BPF probe", err);
    for (AttachHookKind kind : kHookKinds) {
      std::string& refused = refusal_of(refusals, kind);
      if (refused.empty() && (!failed || *failed == kind)) refused = why;
    }
    probe.reset();  // destroys the skeleton
    return load_with(options, refusals, write_hook_refusal);
  }
  probe->set_refusals(refusals);
  if (auto attached = probe->attach_always_on(); !attached) return attached.error();
  probe->prepare_attach_hook();
  // What the node's policy is made of is not known yet: both hooks, until focus() says.
  if (auto focused = probe->focus(DevicePolicyForm::kUnknown); !focused) {
    // A kernel may load the write path hook and still refuse to attach it (Debian's arm64
    // 6.1: an fexit program on a kernel function needs ftrace direct calls, which arm64 has
    // from 6.5; ENOTSUPP): the probe works on without it, as where it does not load.
    if (write_hook && !probe->write_path_hook()) {
      std::string why = focused.error().message;
      probe.reset();  // destroys the skeleton
      return load_with(options, refusals, why);
    }
    return focused.error();
  }
  if (options.syscall_hook) {
    if (auto hooked = probe->set_syscall_hook(true); !hooked) return hooked.error();
  }
  if (auto links = probe->remember_existing_device_links(); !links) return links.error();
  if (auto ring = probe->open_ring_buffer(); !ring) return ring.error();
  // Loading parsed the kernel's BTF (~12 MiB, freed by now): hand the freed pages back
  // rather than keep them resident for the daemon's life.
  ::malloc_trim(0);
  return std::unique_ptr<Probe>(std::move(probe));
}

}  // namespace
}  // namespace gdw::probe_detail

namespace gdw {

Result<std::unique_ptr<Probe>> Probe::load(const ProbeOptions& options) {
  capture_libbpf_log();
  libbpf_set_strict_mode(LIBBPF_STRICT_ALL);
  if (::access(probe_detail::kKernelBtf, R_OK) != 0) {
    // Debian's 6.1 and 6.12 kernels let only root read it (the kernel matrix's guests).
    if (errno == EACCES || errno == EPERM)
      return Error{std::string("reading kernel BTF at ") + probe_detail::kKernelBtf + ": permission denied; " +
                   probe_detail::kPrivilegeHint};
    return Error{std::string("kernel BTF is not available at ") + probe_detail::kKernelBtf + " (" + errno_text(errno) +
                 "): the probe needs a kernel built with CONFIG_DEBUG_INFO_BTF=y"};
  }
  return probe_detail::load_with(options, probe_detail::refusals_before_load(options));
}

}  // namespace gdw
