// gdw::Probe on the devwatch skeleton, its data side: the links that existed before the
// probe, the two ring buffers and their records, the maps the daemon fills (watched
// cgroups, program cgroups, majors, device node paths), the counters.
#include <bpf/bpf.h>
#include <bpf/libbpf.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <exception>
#include <string_view>
#include <vector>

#include "devwatch_events.h"
#include "probe/bpf_probe_impl.h"
#include "probe/libbpf_log.h"
#include "probe/probe_records.h"

namespace gdw::probe_detail {

Error load_error(const std::string& step, int err) {
  auto log = libbpf_log_tail(256);
  if (auto explained = explain_libbpf_failure(log)) return Error{step + ": " + *explained};
  if (err == -EPERM) return Error{step + ": permission denied; " + kPrivilegeHint};
  std::string tail;
  for (std::size_t i = log.size() > 3 ? log.size() - 3 : 0; i < log.size(); ++i) tail += " | " + log[i];
  return Error{step + ": " + errno_text(err) + (tail.empty() ? "" : " (libbpf:" + tail.substr(2) + ")")};
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
static std::size_t per_cpu_slots() {
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

Status BpfProbe::await_writer_exit(pid_t pid) {
  const auto key = static_cast<std::uint32_t>(pid);
  std::uint8_t present = 1;
  if (pid > 0 && bpf_map__update_elem(skeleton_->maps.awaited_writers, &key, sizeof(key), &present, sizeof(present),
                                      BPF_ANY) == 0)
    return {};
  return Error{"awaiting the exit of writer " + std::to_string(pid) + " in the probe: " + errno_text(errno)};
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

}  // namespace gdw::probe_detail
