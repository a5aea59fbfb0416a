// The kernel half of device_programs_v2.h, repairing side: put our wrapper around a denying
// program's code in that program's place, and detach a program a wrapper of ours put in
// place already runs, until no program that we can replace denies a wanted device.
#include <bpf/bpf.h>
#include <linux/bpf.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>

#include "backend/device_program_cache.h"
#include "backend/device_programs_v2.h"
#include "backend/device_programs_v2_kernel.h"

namespace gdw {
namespace {

using v2_kernel::OwnedFd;

// What putting a program in another's place, or detaching one, came to.
struct Change {
  bool done = false;  // false: the program was not found where it was (detached meanwhile, or link-attached)
  V2Repair::Replaced replaced;
  std::string detach_error;  // attach-then-detach only: ours is in, the old one stayed
};

// `program`'s descriptor: the look's, else opened by id into `opened`; -1 when it is gone.
int program_fd(const AttachedDeviceProgram& program, OwnedFd& opened) {
  if (program.fd) return *program.fd;
  opened = OwnedFd(bpf_prog_get_fd_by_id(program.id));
  return opened.valid() ? opened.get() : -1;
}

// Puts `fresh` in the place of `old_program`. In BPF_F_ALLOW_MULTI mode through BPF_F_REPLACE
// (kernels before 5.6 lack it: attach, then detach); a cgroup in single-program mode (an
// old runtime attached without BPF_F_ALLOW_MULTI) has its one program swapped by an attach
// with the same flags. Either way there is no moment without the old program's verdicts.
Result<Change> swap_program(int cgroup_fd, const std::string& dir, std::uint32_t mode,
                            const DeviceProgramCache::Wrapper& wrapper, const AttachedDeviceProgram& old_program) {
  const int fresh = wrapper.fd;
  const std::uint32_t old_id = old_program.id;
  Change change;
  OwnedFd opened;
  const int old = program_fd(old_program, opened);
  if (old < 0) return change;
  change.replaced = {old_id, wrapper.id, true};
  struct bpf_prog_attach_opts opts {};
  opts.sz = sizeof(opts);
  opts.flags = mode & (BPF_F_ALLOW_MULTI | BPF_F_ALLOW_OVERRIDE);
  if (mode & BPF_F_ALLOW_MULTI) {
    opts.flags |= BPF_F_REPLACE;
    opts.replace_prog_fd = old;
  }
  if (bpf_prog_attach_opts(fresh, cgroup_fd, BPF_CGROUP_DEVICE, &opts) == 0) {
    change.done = true;
    return change;
  }
  if (errno == ENOENT) return change;
  auto failed = [&] {
    return Error{"attaching the device program wrapping program " + std::to_string(old_id) + " to " + dir + ": " +
                 errno_text(errno)};
  };
  if (errno != EINVAL || !(mode & BPF_F_ALLOW_MULTI)) return failed();
  opts.flags = BPF_F_ALLOW_MULTI;
  opts.replace_prog_fd = 0;
  if (bpf_prog_attach_opts(fresh, cgroup_fd, BPF_CGROUP_DEVICE, &opts) != 0) return failed();
  change.done = true;
  change.replaced.atomic = false;
  if (bpf_prog_detach2(old, cgroup_fd, BPF_CGROUP_DEVICE) != 0 && errno != ENOENT)
    change.detach_error = "detaching it from " + dir + ": " + errno_text(errno);
  return change;
}

Result<bool> detach_program(int cgroup_fd, const std::string& dir, const AttachedDeviceProgram& program) {
  OwnedFd opened;
  const int prog = program_fd(program, opened);
  if (prog < 0) return false;
  if (bpf_prog_detach2(prog, cgroup_fd, BPF_CGROUP_DEVICE) == 0) return true;
  if (errno == ENOENT) return false;
  return Error{"detaching device program " + std::to_string(program.id) + " from " + dir + ": " + errno_text(errno)};
}

// One cgroup of the container (its own, or crun's sub-cgroup): adds to `repair`.
class CgroupRepair {
 public:
  CgroupRepair(const v2_kernel::DeviceCgroup& where, const std::vector<WantedDevice>& wanted, DeviceProgramCache& cache,
               V2Repair& repair)
      : where_(where), wanted_(wanted), cache_(cache), repair_(repair) {}

  // `seen`: this cgroup as a snapshot just found it, for the first round (nullptr: query).
  // The programs attached at the end when a query found nothing left to do (the caller's
  // own final query is then not needed); nullopt otherwise.
  Result<std::optional<std::vector<AttachedDeviceProgram>>> run(int cgroup_fd,
                                                                const DeviceProgramsSnapshot::Cgroup* seen) {
    const std::size_t left_before = repair_.left_attached.size();
    for (int round = 0; round < kRepairRounds; ++round) {
      v2_kernel::AttachedIds ids;
      std::vector<AttachedDeviceProgram> attached;
      const bool queried_now = round > 0 || !seen;
      if (!queried_now) {
        ids.attach_flags = seen->attach_flags;
        attached = seen->programs;
        for (const auto& p : attached) ids.ids.push_back(p.id);
      } else {
        auto queried = v2_kernel::describe_attached(cgroup_fd, where_.dir, cache_, links_ ? &*links_ : nullptr, &ids);
        if (!queried) return queried.error();
        attached = std::move(*queried);
      }
      for (auto& p : attached) p.subgroup = where_.subgroup;
      V2Plan plan = plan_v2_repair(attached, wanted_);
      repair_.left_attached.resize(left_before);
      for (auto& l : plan.leave) repair_.left_attached.push_back(std::move(l));
      if (plan.replace.empty() && plan.detach.empty()) {
        if (queried_now) return std::optional(std::move(attached));
        return std::optional<std::vector<AttachedDeviceProgram>>();
      }
      auto acted = act(cgroup_fd, ids.attach_flags, plan);
      if (!acted) return acted.error();
    }
    // Still changing after every round: the caller's final query tells.
    return std::optional<std::vector<AttachedDeviceProgram>>();
  }

 private:
  // Replacements first: a program is only detached once what makes its removal harmless
  // is in place.
  Status act(int cgroup_fd, std::uint32_t mode, const V2Plan& plan) {
    for (const auto& r : plan.replace) {
      auto fresh = cache_.wrapper(r.added, r.old.inner, where_.dir, r.old.id, Clock::now());
      if (!fresh) return fresh.error();
      auto change = swap_program(cgroup_fd, where_.dir, mode, *fresh, r.old);
      if (!change) return change.error();
      if (!change->done) {
        // Not where it was: detached meanwhile (the next round's query shows it gone), or
        // attached through a bpf_link, which BPF_F_REPLACE does not find. Which ones are
        // link-attached is worth a walk of every link on the node only now.
        if (!links_) links_ = v2_kernel::link_attached_program_ids(where_.dir);
        continue;
      }
      repair_.replaced.push_back(change->replaced);
      cache_.forget_program(r.old.id);
      if (!change->detach_error.empty()) repair_.left_attached.push_back({r.old, change->detach_error});
      if (auto detached = detach_all(cgroup_fd, r.twins); !detached) return detached;
    }
    return detach_all(cgroup_fd, plan.detach);
  }

  Status detach_all(int cgroup_fd, const std::vector<AttachedDeviceProgram>& programs) {
    for (const auto& p : programs) {
      auto detached = detach_program(cgroup_fd, where_.dir, p);
      if (!detached) return detached.error();
      repair_.detached += *detached;
      if (*detached) cache_.forget_program(p.id);
    }
    return {};
  }

  const v2_kernel::DeviceCgroup& where_;
  const std::vector<WantedDevice>& wanted_;
  DeviceProgramCache& cache_;
  V2Repair& repair_;
  std::optional<std::set<std::uint32_t>> links_;  // link-attached program ids, once needed
};

Status repair_cgroup(const v2_kernel::DeviceCgroup& where, const std::vector<WantedDevice>& wanted,
                     DeviceProgramCache& cache, const DeviceProgramsSnapshot::Cgroup* seen, V2Repair& repair) {
  // Through the look's own descriptor where there was a look: the same cgroup, whatever
  // happened to its path since.
  v2_kernel::OwnedFd opened;
  int cgroup_fd = seen && seen->fd ? *seen->fd : -1;
  if (cgroup_fd < 0) {
    auto cgroup = v2_kernel::open_cgroup(where.dir);
    if (!cgroup) {
      // crun's sub-cgroup going away with its container is not an error of the container's.
      if (!where.subgroup.empty() && ::access(where.dir.c_str(), F_OK) != 0) return {};
      return cgroup.error();
    }
    opened = std::move(*cgroup);
    cgroup_fd = opened.get();
  }
  auto done = CgroupRepair(where, wanted, cache, repair).run(cgroup_fd, seen);
  if (!done) return done.error();
  Result<std::vector<AttachedDeviceProgram>> now =
      *done ? Result<std::vector<AttachedDeviceProgram>>(std::move(**done))
            : v2_kernel::describe_attached(cgroup_fd, where.dir, cache);
  if (!now) return now.error();
  for (auto& p : *now) {
    p.subgroup = where.subgroup;
    repair.now.push_back(std::move(p));
  }
  return {};
}

// The cgroups to repair: those the look found (no second lookup of crun's sub-cgroup), or,
// without a look, those there now.
std::vector<std::pair<v2_kernel::DeviceCgroup, const DeviceProgramsSnapshot::Cgroup*>> cgroups_to_repair(
    const std::string& cgroup_dir, const DeviceProgramsSnapshot* seen) {
  std::vector<std::pair<v2_kernel::DeviceCgroup, const DeviceProgramsSnapshot::Cgroup*>> out;
  if (seen) {
    for (const auto& cg : seen->cgroups)
      out.push_back({{cg.subgroup.empty() ? cgroup_dir : cgroup_dir + "/" + cg.subgroup, cg.subgroup}, &cg});
    return out;
  }
  for (auto& where : v2_kernel::device_cgroups_of(cgroup_dir)) out.push_back({std::move(where), nullptr});
  return out;
}

}  // namespace

Result<V2Repair> repair_device_programs(const std::string& cgroup_dir, const std::vector<WantedDevice>& wanted,
                                        DeviceProgramCache& cache, const DeviceProgramsSnapshot* seen) {
  V2Repair repair;
  for (const auto& [where, seen_here] : cgroups_to_repair(cgroup_dir, seen))
    if (auto done = repair_cgroup(where, wanted, cache, seen_here, repair); !done) return done.error();
  repair.still_denied = denied_by_programs(repair.now, wanted);
  std::vector<AttachedDeviceProgram> unreplaceable;
  for (const auto& left : repair.left_attached) unreplaceable.push_back(left.program);
  for (const auto& d : denied_by_programs(unreplaceable, wanted))
    if (std::any_of(repair.still_denied.begin(), repair.still_denied.end(),
                    [&](const WantedDevice& s) { return s.dev == d.dev; }))
      repair.refused.push_back(d);
  return repair;
}

Result<V2Repair> repair_device_programs(const std::string& cgroup_dir, const std::vector<WantedDevice>& wanted) {
  DeviceProgramCache cache;
  return repair_device_programs(cgroup_dir, wanted, cache);
}

}  // namespace gdw
