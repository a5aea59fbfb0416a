// gdw::Probe on the devwatch skeleton (bpf/devwatch.bpf.c): tp_btf programs, attached by
// BTF id (no tracefs needed), and one ring buffer. Not thread-safe: one thread, the
// daemon's event loop, owns it.
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
#include "probe/libbpf_log.h"
#include "probe/probe.h"
#include "probe/probe_records.h"

namespace gdw {
namespace {

constexpr const char* kKernelBtf = "/sys/kernel/btf/vmlinux";
constexpr const char* kPrivilegeHint =
    "it needs CAP_BPF and CAP_PERFMON (or CAP_SYS_ADMIN), and kernel lockdown in "
    "'confidentiality' mode forbids it";

Error load_error(const std::string& step, int err) {
  auto log = libbpf_log_tail(256);
  if (auto explained = explain_libbpf_failure(log)) return Error{step + ": " + *explained};
  if (err == -EPERM) return Error{step + ": permission denied; " + kPrivilegeHint};
  std::string tail;
  for (std::size_t i = log.size() > 3 ? log.size() - 3 : 0; i < log.size(); ++i) tail += " | " + log[i];
  return Error{step + ": " + errno_text(err) + (tail.empty() ? "" : " (libbpf:" + tail.substr(2) + ")")};
}

// Whether the running kernel has the cap_capable tracepoint (added in 6.14).
bool kernel_has_cap_capable_tracepoint() {
  btf* vmlinux = btf__load_vmlinux_btf();
  if (!vmlinux) return false;
  bool found = btf__find_by_name_kind(vmlinux, "btf_trace_cap_capable", BTF_KIND_TYPEDEF) >= 0;
  btf__free(vmlinux);
  return found;
}

class BpfProbe final : public Probe {
 public:
  BpfProbe(devwatch* skeleton, bool rule_writes_need_hook)
      : skeleton_(skeleton), rule_writes_need_hook_(rule_writes_need_hook) {}
  ~BpfProbe() override {
    ring_buffer__free(ring_);
    bpf_link__destroy(syscall_hook_);
    bpf_link__destroy(attach_hook_);
    bpf_link__destroy(capability_hook_);
    for (bpf_link* link : links_) bpf_link__destroy(link);
    devwatch::destroy(skeleton_);
  }
  BpfProbe(const BpfProbe&) = delete;
  BpfProbe& operator=(const BpfProbe&) = delete;

  Status attach_always_on();
  // The attach hook's call sites looked up (gdw_lookup_symbols, run once); where that
  // cannot be done attach_hook_problem() says why and it is never attached.
  void prepare_attach_hook();
  void set_attach_hook_problem(std::string problem) { attach_hook_problem_ = std::move(problem); }
  Status remember_existing_device_links();
  Status open_ring_buffer();

  Status set_syscall_hook(bool attached) override;
  bool syscall_hook_attached() const override { return syscall_hook_ != nullptr; }
  bool rule_writes_need_syscall_hook() const override { return rule_writes_need_hook_; }
  bool attach_hook() const override { return attach_hook_ != nullptr; }
  const std::string& attach_hook_problem() const override { return attach_hook_problem_; }
  Status focus(DevicePolicyForm form) override;
  bool capability_hook() const override { return capability_hook_ != nullptr; }

  int fd() const override { return ring_buffer__epoll_fd(ring_); }
  Result<int> consume(const std::function<void(const ProbeEvent&)>& handler, int max_records) override;
  Status watch_cgroup(std::uint64_t cgroup_id) override;
  Status unwatch_cgroup(std::uint64_t cgroup_id) override;
  Result<std::uint64_t> other_denied_opens(std::uint64_t cgroup_id) const override;
  Status watch_major(std::uint32_t major) override;
  Status watch_program_cgroup(std::uint64_t cgroup_id) override;
  Status unwatch_program_cgroup(std::uint64_t cgroup_id) override;
  Status watch_device_node(const std::string& path, std::uint32_t major, std::uint32_t minor) override;
  ProbeStats stats() const override;

 private:
  static int on_record(void* self, void* data, std::size_t size);
  int deliver(std::string_view record);
  Status set_attach_hook(bool attached);
  Status set_capability_hook(bool attached);

  devwatch* skeleton_;
  bool rule_writes_need_hook_;
  std::vector<bpf_link*> links_;
  bpf_link* syscall_hook_ = nullptr;
  bpf_link* attach_hook_ = nullptr;
  bool attach_hook_usable_ = false;  // loaded and its call sites found
  std::string attach_hook_problem_;
  bpf_link* capability_hook_ = nullptr;
  ring_buffer* ring_ = nullptr;
  // Set only while consume() runs.
  const std::function<void(const ProbeEvent&)>* handler_ = nullptr;
  int delivered_ = 0;
  int records_left_ = 0;
  std::optional<Error> consume_error_;
  std::uint64_t events_ = 0;
};

// What on_record returns once consume()'s budget is spent. libbpf (checked in 1.1.2's
// ringbuf_process_ring; ring_buffer__consume_n came later) stops at a negative return,
// with the consumer position already past that record, and ring_buffer__consume returns
// the value: the record is handled, the rest waits.
constexpr int kBudgetSpent = -EAGAIN;

// The programs attached apart: the syscall hook (on demand), the attach hook's pair and
// the capability hook (as the node's device policy needs them: focus()).
bool attached_apart(const devwatch* skeleton, const bpf_program* program) {
  return program == skeleton->progs.gdw_sys_exit || program == skeleton->progs.gdw_effective_progs ||
         program == skeleton->progs.gdw_lookup_symbols || program == skeleton->progs.gdw_cap_check;
}

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
  if (!bpf_program__autoload(skeleton_->progs.gdw_effective_progs)) return;  // problem set at load
  LIBBPF_OPTS(bpf_test_run_opts, run);
  if (bpf_prog_test_run_opts(bpf_program__fd(skeleton_->progs.gdw_lookup_symbols), &run) != 0) {
    attach_hook_problem_ = "looking up its call sites: " + errno_text(errno);
    return;
  }
  bool found = false;
  for (std::uint64_t site : skeleton_->bss->effective_progs_sites) found |= site != 0;
  if (!found) {
    attach_hook_problem_ = "none of its call sites (compute_effective_progs, update_effective_progs, "
                           "bpf_prog_array_alloc) is in the kernel's symbols (kptr_restrict, lockdown?)";
    return;
  }
  attach_hook_usable_ = true;
}

// Attaches `program` (as `link`) or destroys its link; nothing when already so. false:
// the attach failed, with errno set.
bool set_link(bpf_link*& link, bpf_program* program, bool attached) {
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

Status BpfProbe::set_attach_hook(bool attached) {
  if (set_link(attach_hook_, skeleton_->progs.gdw_effective_progs, attached)) return {};
  Error failed = load_error("attaching it (tp_btf/kmalloc)", -errno);
  attach_hook_problem_ = failed.message;
  attach_hook_usable_ = false;  // not tried again on every focus
  return failed;
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
  const bool attach_wanted = form != DevicePolicyForm::kRuleFiles && attach_hook_usable_;
  // A refusal is kept in attach_hook_problem(): the probe works on without it.
  if (attach_wanted) (void)set_attach_hook(true);
  const bool attaches_seen = attach_hook_ != nullptr;
  // Without the attach hook, a program load (its CAP_BPF check) is what cgroup v2 shows.
  const bool capability_wanted = (form != DevicePolicyForm::kPrograms || !attaches_seen) &&
                                 bpf_program__autoload(skeleton_->progs.gdw_cap_check);
  Status capability = capability_wanted ? set_capability_hook(true) : Status{};
  skeleton_->data->report_program_loads = form != DevicePolicyForm::kRuleFiles && !attaches_seen;
  if (!attach_wanted) (void)set_attach_hook(false);
  if (!capability_wanted) (void)set_capability_hook(false);
  return capability;
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

// The kernel side learns BPF_CGROUP_DEVICE links from LINK_CREATE; links made before the
// probe was attached are listed here, so that their detach still names the cgroup.
Status BpfProbe::remember_existing_device_links() {
  std::uint32_t id = 0;
  int listing_error = 0;
  for (;;) {
    if (bpf_link_get_next_id(id, &id) != 0) {
      listing_error = errno;
      break;
    }
    int fd = bpf_link_get_fd_by_id(id);
    if (fd < 0) continue;  // released meanwhile
    bpf_link_info info{};
    std::uint32_t length = sizeof(info);
    int err = bpf_obj_get_info_by_fd(fd, &info, &length);
    ::close(fd);
    if (err != 0 || info.type != BPF_LINK_TYPE_CGROUP || info.cgroup.attach_type != BPF_CGROUP_DEVICE) continue;
    gdw_device_link link{info.cgroup.cgroup_id, info.prog_id, 0};
    // NOEXIST: an entry the kernel side wrote since attaching is at least as fresh.
    bpf_map__update_elem(skeleton_->maps.cgroup_device_links, &id, sizeof(id), &link, sizeof(link), BPF_NOEXIST);
  }
  if (listing_error != ENOENT) {  // ENOENT: past the last link
    return Error{"listing existing BPF links: " + errno_text(listing_error) +
                 (listing_error == EPERM ? " (needs CAP_SYS_ADMIN)" : "")};
  }
  return {};
}

// Two rings, consumed in this order: rule writes, device programs and cgroup events first,
// then denied opens (a tenant can fill that ring; it cannot delay the other).
Status BpfProbe::open_ring_buffer() {
  clear_libbpf_log();
  ring_ = ring_buffer__new(bpf_map__fd(skeleton_->maps.events), &BpfProbe::on_record, this, nullptr);
  if (!ring_) return load_error("opening the probe ring buffer", -errno);
  clear_libbpf_log();
  if (int err = ring_buffer__add(ring_, bpf_map__fd(skeleton_->maps.denied_open_events), &BpfProbe::on_record, this);
      err != 0)
    return load_error("opening the probe's denied-open ring buffer", err);
  return {};
}

int BpfProbe::on_record(void* self, void* data, std::size_t size) {
  return static_cast<BpfProbe*>(self)->deliver(std::string_view(static_cast<const char*>(data), size));
}

// Constant work per record: decode, hand over. Nothing here may block or look anything up.
int BpfProbe::deliver(std::string_view record) {
  const int done = --records_left_ <= 0 ? kBudgetSpent : 0;
  auto event = decode_probe_record(record);
  if (!event) {
    // Skip it and keep draining; consume() reports the first one.
    if (!consume_error_) consume_error_ = event.error();
    return done;
  }
  try {
    (*handler_)(*event);
  } catch (const std::exception& e) {
    consume_error_ = Error{std::string("probe event handler failed: ") + e.what()};
    return -ECANCELED;  // stops ring_buffer__consume; later records stay for the next call
  } catch (...) {
    consume_error_ = Error{"probe event handler failed with a non-standard exception"};
    return -ECANCELED;
  }
  ++delivered_;
  ++events_;
  return done;
}

Result<int> BpfProbe::consume(const std::function<void(const ProbeEvent&)>& handler, int max_records) {
  handler_ = &handler;
  delivered_ = 0;
  records_left_ = max_records > 0 ? max_records : 1;
  consume_error_.reset();
  int consumed = ring_buffer__consume(ring_);
  handler_ = nullptr;
  if (consume_error_) return *consume_error_;
  if (consumed < 0 && consumed != kBudgetSpent) return Error{"reading the probe ring buffer: " + errno_text(consumed)};
  return delivered_;
}

// Values of watched_cgroups are per-CPU counters (denied opens of other paths).
std::size_t per_cpu_slots() {
  int cpus = libbpf_num_possible_cpus();
  return cpus > 0 ? static_cast<std::size_t>(cpus) : 1;
}

Status BpfProbe::watch_cgroup(std::uint64_t cgroup_id) {
  std::vector<std::uint64_t> zero(per_cpu_slots(), 0);
  // NOEXIST: watching again must not reset the count the daemon takes differences of.
  if (bpf_map__update_elem(skeleton_->maps.watched_cgroups, &cgroup_id, sizeof(cgroup_id), zero.data(),
                           zero.size() * sizeof(std::uint64_t), BPF_NOEXIST) == 0)
    return {};
  int err = errno;
  if (err == EEXIST) return {};
  return Error{"watching cgroup " + std::to_string(cgroup_id) + " in the probe: " + errno_text(err) +
               (err == E2BIG ? " (watched_cgroups map is full)" : "")};
}

Result<std::uint64_t> BpfProbe::other_denied_opens(std::uint64_t cgroup_id) const {
  std::vector<std::uint64_t> per_cpu(per_cpu_slots(), 0);
  if (bpf_map__lookup_elem(skeleton_->maps.watched_cgroups, &cgroup_id, sizeof(cgroup_id), per_cpu.data(),
                           per_cpu.size() * sizeof(std::uint64_t), 0) != 0) {
    int err = errno;
    return Error{"reading the denied-open count of cgroup " + std::to_string(cgroup_id) + ": " + errno_text(err)};
  }
  std::uint64_t total = 0;
  for (auto n : per_cpu) total += n;
  return total;
}

Status BpfProbe::unwatch_cgroup(std::uint64_t cgroup_id) {
  if (bpf_map__delete_elem(skeleton_->maps.watched_cgroups, &cgroup_id, sizeof(cgroup_id), 0) == 0) return {};
  int err = errno;
  if (err == ENOENT) return {};
  return Error{"unwatching cgroup " + std::to_string(cgroup_id) + " in the probe: " + errno_text(err)};
}

Status BpfProbe::watch_program_cgroup(std::uint64_t cgroup_id) {
  std::uint8_t present = 1;
  if (bpf_map__update_elem(skeleton_->maps.program_cgroups, &cgroup_id, sizeof(cgroup_id), &present, sizeof(present),
                           BPF_ANY) == 0)
    return {};
  int err = errno;
  return Error{"watching the device programs of cgroup " + std::to_string(cgroup_id) + " in the probe: " +
               errno_text(err) + (err == E2BIG ? " (program_cgroups map is full)" : "")};
}

Status BpfProbe::unwatch_program_cgroup(std::uint64_t cgroup_id) {
  if (bpf_map__delete_elem(skeleton_->maps.program_cgroups, &cgroup_id, sizeof(cgroup_id), 0) == 0 || errno == ENOENT)
    return {};
  return Error{"unwatching the device programs of cgroup " + std::to_string(cgroup_id) + ": " + errno_text(errno)};
}

Status BpfProbe::watch_major(std::uint32_t major_number) {
  std::uint8_t present = 1;
  if (bpf_map__update_elem(skeleton_->maps.watched_majors, &major_number, sizeof(major_number), &present,
                           sizeof(present), BPF_ANY) != 0) {
    return Error{"watching device major " + std::to_string(major_number) + " in the probe: " + errno_text(errno)};
  }
  return {};
}

Status BpfProbe::watch_device_node(const std::string& path, std::uint32_t major_number, std::uint32_t minor_number) {
  gdw_path_key key{};
  if (path.empty() || path.size() >= sizeof(key.path)) {
    return Error{"device node path '" + path + "' must be 1 to " + std::to_string(sizeof(key.path) - 1) + " bytes"};
  }
  std::memcpy(key.path, path.data(), path.size());
  gdw_device_number device{major_number, minor_number};
  if (bpf_map__update_elem(skeleton_->maps.watched_paths, &key, sizeof(key), &device, sizeof(device), BPF_ANY) != 0) {
    return Error{"registering device node " + path + " in the probe: " + errno_text(errno)};
  }
  return {};
}

ProbeStats BpfProbe::stats() const {
  ProbeStats stats;
  stats.events = events_;
  int cpus = libbpf_num_possible_cpus();
  if (cpus > 0) {
    std::vector<std::uint64_t> per_cpu(static_cast<std::size_t>(cpus));
    std::uint32_t key = 0;
    if (bpf_map__lookup_elem(skeleton_->maps.ring_buffer_drops, &key, sizeof(key), per_cpu.data(),
                             per_cpu.size() * sizeof(std::uint64_t), 0) == 0) {
      for (auto drops : per_cpu) stats.ring_buffer_drops += drops;
    }
  }
  return stats;
}

}  // namespace

Result<std::unique_ptr<Probe>> Probe::load(const ProbeOptions& options) {
  capture_libbpf_log();
  libbpf_set_strict_mode(LIBBPF_STRICT_ALL);
  if (::access(kKernelBtf, R_OK) != 0) {
    // Debian's 6.1 and 6.12 kernels let only root read it (the kernel matrix's guests).
    if (errno == EACCES || errno == EPERM)
      return Error{std::string("reading kernel BTF at ") + kKernelBtf + ": permission denied; " + kPrivilegeHint};
    return Error{std::string("kernel BTF is not available at ") + kKernelBtf + " (" + errno_text(errno) +
                 "): the probe needs a kernel built with CONFIG_DEBUG_INFO_BTF=y"};
  }
  clear_libbpf_log();
  devwatch* skeleton = devwatch::open();
  if (!skeleton) return load_error("opening the BPF probe object", -errno);
  const bool rule_writes_need_hook = !options.use_capability_tracepoint || !kernel_has_cap_capable_tracepoint();
  auto probe = std::make_unique<BpfProbe>(skeleton, rule_writes_need_hook);
  skeleton->rodata->ignored_writer_tgid = options.ignored_writer_tgid;
  skeleton->rodata->report_allow_writes = options.report_allow_writes;
  if (rule_writes_need_hook) {
    skeleton->rodata->rule_writes_at_syscall_exit = true;
    bpf_program__set_autoload(skeleton->progs.gdw_cap_check, false);
  }
  if (!options.attach_hook) {
    bpf_program__set_autoload(skeleton->progs.gdw_effective_progs, false);
    bpf_program__set_autoload(skeleton->progs.gdw_lookup_symbols, false);
    probe->set_attach_hook_problem("turned off");
  }
  clear_libbpf_log();
  if (int err = devwatch::load(skeleton); err != 0) {
    if (!options.attach_hook) return load_error("loading the BPF probe", err);
    // The attach hook is what a kernel may refuse (bpf_kallsyms_lookup_name needs 5.16 and
    // CAP_PERFMON): the rest of the probe works without it.
    Error without = load_error("loading the attach hook", err);
    ProbeOptions fallback = options;
    fallback.attach_hook = false;
    auto retried = load(fallback);
    if (retried) static_cast<BpfProbe*>(retried->get())->set_attach_hook_problem(without.message);
    return retried;
  }
  if (auto attached = probe->attach_always_on(); !attached) return attached.error();
  probe->prepare_attach_hook();
  // What the node's policy is made of is not known yet: both hooks, until focus() says.
  if (auto focused = probe->focus(DevicePolicyForm::kUnknown); !focused) return focused.error();
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

}  // namespace gdw
