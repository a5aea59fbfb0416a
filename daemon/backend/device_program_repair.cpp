// The kernel half of device_programs_v2.h, repairing side: load our wrapper around a
// denying program's code and put it in that program's place.
#include <bpf/bpf.h>
#include <linux/bpf.h>
#include <unistd.h>

#include <cerrno>

#include "backend/device_programs_v2.h"
#include "backend/device_programs_v2_kernel.h"

namespace gdw {
namespace {

using v2_kernel::errno_text;
using v2_kernel::OwnedFd;

int load_program(const BpfCode& code, std::string* log) {
  struct bpf_prog_load_opts opts {};
  opts.sz = sizeof(opts);
  opts.expected_attach_type = BPF_CGROUP_DEVICE;
  if (log) {
    opts.log_level = 1;
    opts.log_buf = log->data();
    opts.log_size = static_cast<std::uint32_t>(log->size());
  }
  return bpf_prog_load(BPF_PROG_TYPE_CGROUP_DEVICE, kOurProgramName, "GPL", code.data(),
                       static_cast<std::size_t>(code.size()), &opts);
}

Result<OwnedFd> load_wrapper(const BpfCode& code, const std::string& dir, std::uint32_t old_id) {
  OwnedFd fd(load_program(code, nullptr));
  if (fd.valid()) return fd;
  const int err = errno;
  // Load again with the verifier's log, only to say why.
  std::string log(64 * 1024, '\0');
  OwnedFd again(load_program(code, &log));
  if (again.valid()) return again;
  std::string verifier(log.c_str());
  if (verifier.size() > 600) verifier = "..." + verifier.substr(verifier.size() - 600);
  return Error{"loading the device program wrapping program " + std::to_string(old_id) + " of " + dir + " (" +
               std::to_string(code.size()) + " instructions): " + errno_text(err) +
               (verifier.empty() ? "" : " (verifier: " + verifier + ")")};
}

std::uint32_t program_id(int prog_fd) {
  bpf_prog_info info{};
  std::uint32_t len = sizeof(info);
  return bpf_obj_get_info_by_fd(prog_fd, &info, &len) == 0 ? info.id : 0;
}

struct Swap {
  bool gone = false;  // the old program was detached meanwhile: decide again
  V2Repair::Replaced replaced;
  std::string detach_error;  // attach-then-detach only: ours is in, the old one stayed
};

Swap gone() {
  Swap s;
  s.gone = true;
  return s;
}

// Puts `fresh` in the place of `old_id`. In BPF_F_ALLOW_MULTI mode through BPF_F_REPLACE
// (kernels before 5.6 lack it: attach, then detach); a cgroup in single-program mode (an
// old runtime attached without BPF_F_ALLOW_MULTI) has its one program swapped by an attach
// with the same flags. Either way there is no moment without the old program's verdicts.
Result<Swap> swap_program(int cgroup_fd, const std::string& dir, std::uint32_t mode, int fresh, std::uint32_t old_id) {
  Swap swap;
  OwnedFd old(bpf_prog_get_fd_by_id(old_id));
  if (!old.valid()) return gone();
  swap.replaced = {old_id, program_id(fresh), true};
  struct bpf_prog_attach_opts opts {};
  opts.sz = sizeof(opts);
  opts.flags = mode & (BPF_F_ALLOW_MULTI | BPF_F_ALLOW_OVERRIDE);
  if (mode & BPF_F_ALLOW_MULTI) {
    opts.flags |= BPF_F_REPLACE;
    opts.replace_prog_fd = old.get();
  }
  if (bpf_prog_attach_opts(fresh, cgroup_fd, BPF_CGROUP_DEVICE, &opts) == 0) return swap;
  if (errno == ENOENT) return gone();
  if (errno != EINVAL || !(mode & BPF_F_ALLOW_MULTI))
    return Error{"attaching the device program wrapping program " + std::to_string(old_id) + " to " + dir + ": " +
                 errno_text(errno)};
  opts.flags = BPF_F_ALLOW_MULTI;
  opts.replace_prog_fd = 0;
  if (bpf_prog_attach_opts(fresh, cgroup_fd, BPF_CGROUP_DEVICE, &opts) != 0)
    return Error{"attaching the device program wrapping program " + std::to_string(old_id) + " to " + dir + ": " +
                 errno_text(errno)};
  swap.replaced.atomic = false;
  if (bpf_prog_detach2(old.get(), cgroup_fd, BPF_CGROUP_DEVICE) != 0 && errno != ENOENT)
    swap.detach_error = "detaching it from " + dir + ": " + errno_text(errno);
  return swap;
}

// One cgroup of the container (its own, or crun's sub-cgroup): adds to `repair`.
Status repair_cgroup(const v2_kernel::DeviceCgroup& where, const std::vector<WantedDevice>& wanted, V2Repair& repair) {
  const std::string& cgroup_dir = where.dir;
  auto cgroup = v2_kernel::open_cgroup(cgroup_dir);
  if (!cgroup) {
    // crun's sub-cgroup going away with its container is not an error of the container's.
    if (!where.subgroup.empty() && ::access(cgroup_dir.c_str(), F_OK) != 0) return {};
    return cgroup.error();
  }
  const std::size_t left_before = repair.left_attached.size();
  // A program attached or detached by someone else meanwhile: decide again on a fresh query.
  for (int round = 0; round < 3; ++round) {
    v2_kernel::AttachedIds ids;
    auto attached = v2_kernel::describe_attached(cgroup->get(), cgroup_dir, &ids);
    if (!attached) return attached.error();
    for (auto& p : *attached) p.subgroup = where.subgroup;
    V2Plan plan = plan_v2_repair(*attached, wanted);
    repair.left_attached.resize(left_before);
    for (auto& l : plan.leave) repair.left_attached.push_back(std::move(l));
    bool changed = false;
    for (const auto& r : plan.replace) {
      auto fresh = load_wrapper(r.code, cgroup_dir, r.old.id);
      if (!fresh) return fresh.error();
      auto swap = swap_program(cgroup->get(), cgroup_dir, ids.attach_flags, fresh->get(), r.old.id);
      if (!swap) return swap.error();
      if (swap->gone) {
        changed = true;
        continue;
      }
      repair.replaced.push_back(swap->replaced);
      if (!swap->detach_error.empty()) repair.left_attached.push_back({r.old, swap->detach_error});
    }
    if (!changed) break;
  }
  auto now = v2_kernel::describe_attached(cgroup->get(), cgroup_dir);
  if (!now) return now.error();
  for (auto& p : *now) {
    p.subgroup = where.subgroup;
    repair.now.push_back(std::move(p));
  }
  return {};
}

}  // namespace

Result<V2Repair> repair_device_programs(const std::string& cgroup_dir, const std::vector<WantedDevice>& wanted) {
  V2Repair repair;
  for (const auto& where : v2_kernel::device_cgroups_of(cgroup_dir))
    if (auto done = repair_cgroup(where, wanted, repair); !done) return done.error();
  repair.still_denied = denied_by_programs(repair.now, wanted);
  return repair;
}

}  // namespace gdw
