// The kernel half of device_programs_v2.h, repairing side: put our wrapper around a denying
// program's code in that program's place, and detach a program a wrapper of ours put in
// place already runs, until no program that we can replace denies a wanted device.
#include <bpf/bpf.h>
#include <linux/bpf.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>

#include "backend/cgroup_bpf_calls.h"
#include "backend/device_program_cache.h"
#include "backend/device_programs_v2.h"
#include "backend/device_programs_v2_kernel.h"

namespace gdw {
namespace {

using v2_kernel::OwnedFd;

// What putting a program in another's place, or detaching one, came to.
struct Change {
  bool done = false;  // false: the program was not found where it was (detached meanwhile, or link-attached)
  bool stale = false;  // refused: the cgroup changed since the revision it carried (ESTALE)
  V2Repair::Replaced replaced;
  std::string detach_error;  // attach-then-detach only: ours is in, the old one stayed
};

// `program`'s descriptor: the look's, else opened by id into `opened`; -1 when it is gone.
int program_fd(const AttachedDeviceProgram& program, OwnedFd& opened) {
  if (program.fd) return *program.fd;
  opened = OwnedFd(bpf_prog_get_fd_by_id(program.id));
  return opened.valid() ? opened.get() : -1;
}

// The revision a cgroup is at, as far as a repair knows it: what its query read, moved on
// by each change the repair made itself (the kernel counts one per attach, replace or
// detach). 0: none to check (a kernel without revisions, RevisionCheck::kNever, a look
// that made no query).
struct Revision {
  std::uint64_t expected = 0;
  void acted() {
    if (expected) ++expected;
  }
};

// Puts `fresh` in the place of `old_program`. In BPF_F_ALLOW_MULTI mode through BPF_F_REPLACE
// (kernels before 5.6 lack it: attach, then detach); a cgroup in single-program mode (an
// old runtime attached without BPF_F_ALLOW_MULTI) has its one program swapped by an attach
// with the same flags. Either way there is no moment without the old program's verdicts.
Result<Change> swap_program(int cgroup_fd, const std::string& dir, std::uint32_t mode,
                            const DeviceProgramCache::Wrapper& wrapper, const AttachedDeviceProgram& old_program,
                            Revision& revision) {
  const int fresh = wrapper.fd;
  const std::uint32_t old_id = old_program.id;
  Change change;
  OwnedFd opened;
  const int old = program_fd(old_program, opened);
  if (old < 0) return change;
  change.replaced = {old_id, wrapper.id, true};
  std::uint32_t flags = mode & (BPF_F_ALLOW_MULTI | BPF_F_ALLOW_OVERRIDE);
  const bool replace = (mode & BPF_F_ALLOW_MULTI) != 0;
  if (replace) flags |= BPF_F_REPLACE;
  int err = cgroup_bpf::attach_device_program(cgroup_fd, fresh, flags, replace ? old : -1, revision.expected);
  if (err == 0) {
    revision.acted();
    change.done = true;
    return change;
  }
  if (err == ESTALE) {
    change.stale = true;
    return change;
  }
  if (err == ENOENT) return change;
  auto failed = [&] {
    return Error{"attaching the device program wrapping program " + std::to_string(old_id) + " to " + dir + ": " +
                 errno_text(err)};
  };
  if (err != EINVAL || !replace) return failed();
  err = cgroup_bpf::attach_device_program(cgroup_fd, fresh, BPF_F_ALLOW_MULTI, -1, revision.expected);
  if (err == ESTALE) {
    change.stale = true;
    return change;
  }
  if (err != 0) return failed();
  revision.acted();
  change.done = true;
  change.replaced.atomic = false;
  err = cgroup_bpf::detach_device_program(cgroup_fd, old, revision.expected);
  if (err == 0) revision.acted();
  else if (err == ESTALE) revision.expected = 0;  // ours is in; the next round's query tells the rest
  else if (err != ENOENT) change.detach_error = "detaching it from " + dir + ": " + errno_text(err);
  return change;
}

// Whether `program` was detached (false: it was not there); nullopt: refused as stale.
Result<std::optional<bool>> detach_program(int cgroup_fd, const std::string& dir,
                                           const AttachedDeviceProgram& program, Revision& revision) {
  OwnedFd opened;
  const int prog = program_fd(program, opened);
  if (prog < 0) return std::optional(false);
  const int err = cgroup_bpf::detach_device_program(cgroup_fd, prog, revision.expected);
  if (err == 0) {
    revision.acted();
    return std::optional(true);
  }
  if (err == ESTALE) return std::optional<bool>();
  if (err == ENOENT) return std::optional(false);
  return Error{"detaching device program " + std::to_string(program.id) + " from " + dir + ": " + errno_text(err)};
}

// One cgroup of the container (its own, or crun's sub-cgroup): adds to `repair`.
class CgroupRepair {
 public:
  CgroupRepair(const v2_kernel::DeviceCgroup& where, const std::vector<WantedDevice>& wanted, DeviceProgramCache& cache,
               RevisionCheck check, V2Repair& repair)
      : where_(where), wanted_(wanted), cache_(cache), check_(check), repair_(repair) {}

  // `seen`: this cgroup as a snapshot just found it, for the first round (nullptr: query).
  // The programs attached at the end when a query found nothing left to do (the caller's
  // own final query is then not needed); nullopt otherwise.
  Result<std::optional<std::vector<AttachedDeviceProgram>>> run(int cgroup_fd,
                                                                const DeviceProgramsSnapshot::Cgroup* seen) {
    const std::size_t left_before = repair_.left_attached.size();
    int rounds = 0;
    int stale_looks = 0;
    std::uint32_t newest_seen_first = 0;
    for (bool first = true; rounds < kRepairRounds; first = false) {
      v2_kernel::AttachedIds ids;
      std::vector<AttachedDeviceProgram> attached;
      const bool queried_now = !first || !seen;
      if (!queried_now) {
        ids.attach_flags = seen->attach_flags;
        ids.revision = seen->revision;
        attached = seen->programs;
        for (const auto& p : attached) ids.ids.push_back(p.id);
      } else {
        auto queried = v2_kernel::describe_attached(cgroup_fd, where_.dir, cache_, links_ ? &*links_ : nullptr, &ids);
        if (!queried) return queried.error();
        attached = std::move(*queried);
      }
      for (auto& p : attached) p.subgroup = where_.subgroup;
      V2Plan plan = plan_v2_repair(attached, wanted_);
      if (first) {
        for (const auto& p : attached) newest_seen_first = std::max(newest_seen_first, p.id);
      } else {
        leave_newcomers(plan, newest_seen_first);
      }
      repair_.left_attached.resize(left_before);
      for (auto& l : plan.leave) repair_.left_attached.push_back(std::move(l));
      if (plan.replace.empty() && plan.detach.empty()) {
        if (queried_now) return std::optional(std::move(attached));
        return std::optional<std::vector<AttachedDeviceProgram>>();
      }
      Revision revision{check_ == RevisionCheck::kNever ? 0 : ids.revision};
      auto acted = act(cgroup_fd, ids.attach_flags, plan, revision);
      if (!acted) return acted.error();
      if (*acted) {
        ++rounds;
        continue;
      }
      // Refused as stale: what the plan was decided on is gone. Look again now; that uses
      // up no round (nothing was done), but the looks are bounded.
      ++repair_.stale;
      if (++stale_looks > kMaxStaleLooks) break;
    }
    // Still changing after every round: the caller's final query tells.
    return std::optional<std::vector<AttachedDeviceProgram>>();
  }

 private:
  // Replacements first: a program is only detached once what makes its removal harmless
  // is in place. False: a change was refused as stale (the rest of the plan is not acted on).
  Result<bool> act(int cgroup_fd, std::uint32_t mode, const V2Plan& plan, Revision& revision) {
    for (const auto& r : plan.replace) {
      auto fresh = cache_.wrapper(r.added, r.old.inner, where_.dir, r.old.id, Clock::now());
      if (!fresh) return fresh.error();
      if (revision.expected) ++repair_.checked;
      auto change = swap_program(cgroup_fd, where_.dir, mode, *fresh, r.old, revision);
      if (!change) return change.error();
      if (change->stale) return false;
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
      auto detached = detach_all(cgroup_fd, r.twins, revision);
      if (!detached || !*detached) return detached;
    }
    return detach_all(cgroup_fd, plan.detach, revision);
  }

  Result<bool> detach_all(int cgroup_fd, const std::vector<AttachedDeviceProgram>& programs, Revision& revision) {
    for (const auto& p : programs) {
      if (revision.expected) ++repair_.checked;
      auto detached = detach_program(cgroup_fd, where_.dir, p, revision);
      if (!detached) return detached.error();
      if (!detached->has_value()) return false;
      repair_.detached += **detached;
      if (**detached) cache_.forget_program(p.id);
    }
    return true;
  }

  const v2_kernel::DeviceCgroup& where_;
  const std::vector<WantedDevice>& wanted_;
  DeviceProgramCache& cache_;
  RevisionCheck check_;
  V2Repair& repair_;
  std::optional<std::set<std::uint32_t>> links_;  // link-attached program ids, once needed
};

Status repair_cgroup(const v2_kernel::DeviceCgroup& where, const std::vector<WantedDevice>& wanted,
                     DeviceProgramCache& cache, const DeviceProgramsSnapshot::Cgroup* seen, RevisionCheck check,
                     V2Repair& repair) {
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
  auto done = CgroupRepair(where, wanted, cache, check, repair).run(cgroup_fd, seen);
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
                                        DeviceProgramCache& cache, const DeviceProgramsSnapshot* seen,
                                        RevisionCheck check) {
  V2Repair repair;
  for (const auto& [where, seen_here] : cgroups_to_repair(cgroup_dir, seen))
    if (auto done = repair_cgroup(where, wanted, cache, seen_here, check, repair); !done) return done.error();
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
