// Re-applies of a container's device policy as the re-appliers make them, from the calling
// process (the benches' spinner runs them from inside the container's cgroup; the real-GPU
// test from the test process):
//   cgroup v2, runc 1.1 style   query the attached programs, load a program for the spec,
//                               attach it with BPF_F_ALLOW_MULTI (plus BPF_F_REPLACE of the
//                               old one when exactly one is attached), then detach every
//                               program attached before;
//   cgroup v2, systemd style    load a spec-only program ("sd_devices"), attach it with
//                               BPF_F_ALLOW_MULTI, then detach only the program this
//                               re-applier attached last time: everything else stays, ANDed;
//   cgroup v1, old runc         `a` to devices.deny, then one write per allow of the spec.
// Each returns when its first harmful call started and when the call after which the policy
// stays as the re-applier wants it returned (the attach; v1: the last write), on the
// steady clock (CLOCK_MONOTONIC: comparable between processes).
#pragma once

#include <bpf/bpf.h>
#include <fcntl.h>
#include <linux/bpf.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdint>
#include <string>
#include <vector>

#include "support/foreign_device_program.h"

namespace gdw::bench {

struct Reapply {
  int error = 0;              // errno of the step that failed; 0: done
  const char* step = "";      // "load", "attach", "deny", "allow"
  std::chrono::steady_clock::time_point harm_start;  // the first harmful call started
  std::chrono::steady_clock::time_point applied;     // the attach (v1: the last write) returned
  std::uint32_t program_id = 0;                      // v2: the program attached
};

// The ids of the device programs attached to the cgroup itself (not inherited), in the
// kernel's order; empty on error. The kernel allows 64 per cgroup.
inline std::vector<std::uint32_t> attached_device_program_ids(int cgroup_fd) {
  std::uint32_t ids[64], count = 64, attach_flags = 0;
  if (::bpf_prog_query(cgroup_fd, BPF_CGROUP_DEVICE, 0, &attach_flags, ids, &count) != 0) return {};
  return std::vector<std::uint32_t>(ids, ids + count);
}

namespace detail {

inline Reapply failed(Reapply r, const char* step, int error) {
  r.step = step;
  r.error = error;
  return r;
}

// The attach every v2 style makes; stamps the harm and the attach's return.
inline int timed_attach(Reapply& r, int program_fd, int cgroup_fd, unsigned flags, int replace_fd) {
  struct bpf_prog_attach_opts opts{};
  opts.sz = sizeof opts;
  opts.flags = flags;
  opts.replace_prog_fd = replace_fd;
  r.harm_start = std::chrono::steady_clock::now();
  const int rc = ::bpf_prog_attach_opts(program_fd, cgroup_fd, BPF_CGROUP_DEVICE, &opts);
  r.applied = std::chrono::steady_clock::now();
  return rc == 0 ? 0 : errno;
}

}  // namespace detail

// runc 1.1 (libcontainer/cgroups/ebpf): the old programs are looked up before the new one
// is loaded; with exactly one it is replaced in place, otherwise the new one is ANDed on and
// the old ones detached after (a program the daemon replaced meanwhile is simply gone).
inline Reapply reapply_runc_style(int cgroup_fd, const std::vector<OciDeviceCgroupRule>& rules) {
  Reapply r;
  std::vector<int> old_fds;
  for (std::uint32_t id : attached_device_program_ids(cgroup_fd))
    if (int fd = ::bpf_prog_get_fd_by_id(id); fd >= 0) old_fds.push_back(fd);
  auto close_old = [&] {
    for (int fd : old_fds) ::close(fd);
  };
  test::ForeignProgram program("", rules);
  if (program.fd < 0) {
    close_old();
    return detail::failed(r, "load", program.load_errno);
  }
  r.program_id = program.id;
  const bool replace = old_fds.size() == 1;
  if (int err = detail::timed_attach(r, program.fd, cgroup_fd, BPF_F_ALLOW_MULTI | (replace ? BPF_F_REPLACE : 0),
                                     replace ? old_fds[0] : 0)) {
    close_old();
    return detail::failed(r, "attach", err);
  }
  if (!replace)
    for (int fd : old_fds) ::bpf_prog_detach2(fd, cgroup_fd, BPF_CGROUP_DEVICE);
  close_old();
  return r;
}

// systemd (bpf-devices.c, 252): the new program is attached before the one it attached
// last time is detached; programs anyone else attached stay, so the results are ANDed.
// `previous_id`: the program this re-applier attached last time in this cgroup (0: none).
inline Reapply reapply_systemd_style(int cgroup_fd, const std::vector<OciDeviceCgroupRule>& rules,
                                     std::uint32_t previous_id) {
  Reapply r;
  test::ForeignProgram program("sd_devices", rules);
  if (program.fd < 0) return detail::failed(r, "load", program.load_errno);
  r.program_id = program.id;
  // Gone (replaced by the daemon and freed): nothing of ours to detach.
  const int previous_fd = previous_id != 0 ? ::bpf_prog_get_fd_by_id(previous_id) : -1;
  const int err = detail::timed_attach(r, program.fd, cgroup_fd, BPF_F_ALLOW_MULTI, 0);
  if (err == 0 && previous_fd >= 0) ::bpf_prog_detach2(previous_fd, cgroup_fd, BPF_CGROUP_DEVICE);
  if (previous_fd >= 0) ::close(previous_fd);
  return err != 0 ? detail::failed(r, "attach", err) : r;
}

// Old runc and containerd-shim on cgroup v1: `a` to devices.deny (the harm), then the
// spec's allows, one open/write/close each.
inline Reapply reapply_old_runc_v1(const std::string& cgroup_dir, const std::vector<std::string>& allow_rules) {
  Reapply r;
  auto write_rule = [&r](const std::string& file, const std::string& rule, bool harms) {
    const int fd = ::open(file.c_str(), O_WRONLY | O_CLOEXEC);
    if (fd < 0) return errno;
    if (harms) r.harm_start = std::chrono::steady_clock::now();
    const int err = ::write(fd, rule.data(), rule.size()) < 0 ? errno : 0;
    r.applied = std::chrono::steady_clock::now();
    ::close(fd);
    return err;
  };
  if (int err = write_rule(cgroup_dir + "/devices.deny", "a", true)) return detail::failed(r, "deny", err);
  for (const auto& rule : allow_rules)
    if (int err = write_rule(cgroup_dir + "/devices.allow", rule, false)) return detail::failed(r, "allow", err);
  return r;
}

}  // namespace gdw::bench
