// Internal to daemon/probe: gdw::Probe on the devwatch skeleton (bpf/devwatch.bpf.c),
// shared by bpf_probe.cpp (loading, the hooks and their attaching) and bpf_probe_maps.cpp
// (the ring buffers, the maps the daemon fills, the counters).
#pragma once

#include <bpf/libbpf.h>

#include <cerrno>
#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "core/attach_hook_choice.h"
#include "devwatch.skel.h"
#include "probe/probe.h"

namespace gdw::probe_detail {

// What a load refused for lack of privilege needs (the load errors and the BTF check say it).
inline constexpr const char* kPrivilegeHint =
    "it needs CAP_BPF and CAP_PERFMON (or CAP_SYS_ADMIN), and kernel lockdown in "
    "'confidentiality' mode forbids it";

// A libbpf failure in words an operator can act on.
Error load_error(const std::string& step, int err);

// Not thread-safe: one thread, the daemon's event loop, owns it.
class BpfProbe final : public Probe {
 public:
  // write_hook_refusal: empty when the write path hook (fexit/devcgroup_access_write) was
  // loaded; rule_writes_need_hook: neither it nor the capability hook was.
  BpfProbe(devwatch* skeleton, bool rule_writes_need_hook, std::string write_hook_refusal)
      : skeleton_(skeleton),
        rule_writes_need_hook_(rule_writes_need_hook),
        write_hook_refusal_(std::move(write_hook_refusal)) {}
  ~BpfProbe() override {
    ring_buffer__free(ring_);
    bpf_link__destroy(syscall_hook_);
    for (bpf_link* link : attach_hook_) bpf_link__destroy(link);
    bpf_link__destroy(capability_hook_);
    bpf_link__destroy(write_hook_);
    for (bpf_link* link : links_) bpf_link__destroy(link);
    devwatch::destroy(skeleton_);
  }
  BpfProbe(const BpfProbe&) = delete;
  BpfProbe& operator=(const BpfProbe&) = delete;

  Status attach_always_on();
  // The kmalloc kind's call sites looked up (gdw_lookup_symbols, run once); where that
  // cannot be done its refusal says why and it is never attached.
  void prepare_attach_hook();
  void set_refusals(const AttachHookRefusals& refusals) { refusals_ = refusals; }
  Status remember_existing_device_links();
  Status open_ring_buffer();

  Status set_syscall_hook(bool attached) override;
  bool syscall_hook_attached() const override { return syscall_hook_ != nullptr; }
  bool rule_writes_need_syscall_hook() const override { return rule_writes_need_hook_; }
  bool attach_hook() const override { return attach_hook_kind_.has_value(); }
  std::optional<AttachHookKind> attach_hook_kind() const override { return attach_hook_kind_; }
  bool program_loads_ahead() const override {
    // The kmalloc kind's load point is a call site found in the kernel's symbols.
    const bool load_point = attach_hook_kind_ != AttachHookKind::kKmalloc || skeleton_->bss->program_load_site != 0;
    return attach_hook_kind_ && load_point && skeleton_->data->report_program_loads;
  }
  AttachHookChoice attach_hook_choice() const override;
  Status use_attach_hook(AttachHookKind kind) override;
  Status focus(DevicePolicyForm form) override;
  bool capability_hook() const override { return capability_hook_ != nullptr; }
  bool write_path_hook() const override { return write_hook_ != nullptr; }
  const std::string& write_path_hook_refusal() const override { return write_hook_refusal_; }

  int fd() const override { return ring_buffer__epoll_fd(ring_); }
  Result<int> consume(const std::function<void(const ProbeEvent&)>& handler, int max_records) override;
  Status watch_cgroup(std::uint64_t cgroup_id) override;
  Status unwatch_cgroup(std::uint64_t cgroup_id) override;
  Result<std::uint64_t> other_denied_opens(std::uint64_t cgroup_id) const override;
  Status watch_major(std::uint32_t major) override;
  Status watch_program_cgroup(std::uint64_t cgroup_id) override;
  Status unwatch_program_cgroup(std::uint64_t cgroup_id) override;
  Status watch_device_node(const std::string& path, std::uint32_t major, std::uint32_t minor) override;
  Status await_writer_exit(pid_t pid) override;
  ProbeStats stats() const override;

 private:
  static int on_record(void* self, void* data, std::size_t size);
  int deliver(std::string_view record);
  // Attaches the programs of `kind` (an attach hook's kind), nothing when it is attached
  // already; its refusal records why not.
  bool attach_kind(AttachHookKind kind);
  void detach_attach_hook();
  Status set_capability_hook(bool attached);
  Status set_write_hook(bool attached);

  devwatch* skeleton_;
  bool rule_writes_need_hook_;
  std::string write_hook_refusal_;
  bpf_link* write_hook_ = nullptr;
  std::vector<bpf_link*> links_;
  bpf_link* syscall_hook_ = nullptr;
  std::vector<bpf_link*> attach_hook_;  // the links of the kind attached
  std::optional<AttachHookKind> attach_hook_kind_;
  // Why each kind cannot be used (empty: loaded and not refused yet); kCapability's says
  // whether the capability hook exists.
  AttachHookRefusals refusals_;
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

}  // namespace gdw::probe_detail
