// cgroup v2 device policy: BPF_CGROUP_DEVICE programs attached to a container's cgroup.
// All effective programs must allow an access (results are ANDed), so an extra "allow GPU"
// program grants nothing: a grant means replacing each program that denies a wanted device.
//
// A repair only ever adds the wanted devices:
// - Which programs deny a wanted device is decided by running each attached program's own
//   translated instructions (device_program_code.h), not by assuming what it enforces.
//   A program whose run we cannot follow counts as denying (it gets wrapped, which is safe).
// - Only those programs are replaced; the others stay attached. Nothing is touched while
//   no program denies a wanted device.
// - The replacement of a program is our wrapper around its code: it allows exactly the
//   wanted devices and decides as the program did for every other device. It replaces the
//   program atomically (BPF_F_REPLACE), so there is no moment with fewer devices or fewer
//   restrictions. A wrapper of ours is never wrapped: a re-repair wraps the code it wraps.
// - Programs attached through a bpf_link, and programs whose code cannot be loaded again
//   (helper calls, maps), cannot be replaced by us: they are reported, left attached.
// Our wrappers are self-contained programs: they stay in force after the daemon exits.
#pragma once

#include <array>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "backend/device_program_code.h"
#include "core/desired_state.h"
#include "core/result.h"
#include "runtime/oci_config.h"

namespace gdw {

enum class ProgramOwner { kOurs, kSystemd, kRuntime };
std::string to_string(ProgramOwner o);  // "ours", "systemd", "runtime"
inline constexpr ProgramOwner kProgramOwners[] = {ProgramOwner::kOurs, ProgramOwner::kSystemd, ProgramOwner::kRuntime};
// How many device programs of each owner.
struct ProgramCounts {
  std::array<std::size_t, std::size(kProgramOwners)> by_owner{};
  std::size_t& operator[](ProgramOwner o) { return by_owner[static_cast<std::size_t>(o)]; }
  std::size_t operator[](ProgramOwner o) const { return by_owner[static_cast<std::size_t>(o)]; }
  bool operator==(const ProgramCounts&) const = default;
};

struct AttachedDeviceProgram {
  std::uint32_t id = 0;
  // Where it is attached: "" on the container's cgroup itself, kCrunSubgroup on crun's
  // sub-cgroup of it (runtime/cgroup_names.h).
  std::string subgroup;
  std::string name;  // bpf_prog_info.name (systemd: "sd_devices"; ours: kOurProgramName; runc: "")
  ProgramOwner owner = ProgramOwner::kRuntime;
  bool link = false;  // attached through a bpf_link (only its link can detach it)
  // What the kernel runs for it: its translated instructions (an older union program of
  // ours: its rule list, compiled). Empty when they could not be read.
  SharedBpfCode code;
  // What a wrapper around it has to run for every device it does not add: `code`, or for a
  // wrapper of ours, the code that one wraps. Empty when it cannot be wrapped (`unwrappable`
  // says why).
  SharedBpfCode inner;
  std::string unwrappable;
  bool wrapper = false;               // a wrapper of ours
  std::vector<WantedDevice> added;    // a wrapper of ours: the devices it adds
  // The program's descriptor when this look read it from the kernel (a program new to the
  // cache): a repair puts the wrapper in its place through it, one lookup by id fewer on
  // the reaction's path. Null for a description the cache had, which keeps none (it must
  // not keep a program loaded that its runtime detached). Closed with the last copy.
  std::shared_ptr<const int> fd;
};

// The name our programs carry (bpf_prog_info.name holds 15 characters).
inline constexpr const char* kOurProgramName = "gdw_devices";

class DeviceProgramCache;  // device_program_cache.h
class KeptCgroupDirs;      // kept_cgroup_dirs.h

// Programs attached directly to a container's cgroup directory (not inherited ones), in the
// kernel's order, then those attached to its crun sub-cgroup `<cgroup_dir>/container` when
// that exists (crun with the systemd driver on v2 puts the processes and its program there;
// they run under both). Link-attached ones are recognised by walking the system's bpf links
// (libbpf 1.1 has no link ids in bpf_prog_query): only where a repair needs to know,
// `link` is false until then. Descriptions come from `cache` (device_program_cache.h).
Result<std::vector<AttachedDeviceProgram>> query_device_programs(const std::string& cgroup_dir,
                                                                 DeviceProgramCache& cache);

// One look at a container's device cgroups (its own, then crun's sub-cgroup when it
// exists): the programs attached to each, and each cgroup's attach mode.
struct DeviceProgramsSnapshot {
  struct Cgroup {
    std::string subgroup;  // "" or kCrunSubgroup
    std::uint32_t attach_flags = 0;
    std::vector<AttachedDeviceProgram> programs;
    // The cgroup as opened for this look, or kept open between looks (closed with the last
    // copy): a grant that follows acts through it rather than looking the path up again.
    std::shared_ptr<const int> fd;
    // The cgroup's revision, read with the ids (Linux 6.17+); 0: none (an older kernel, or
    // a look at one program, which makes no query).
    std::uint64_t revision = 0;
  };
  std::vector<Cgroup> cgroups;
  std::vector<AttachedDeviceProgram> all() const;  // every program, own cgroup's first
  ProgramCounts count_by_owner() const;
  // The wanted devices some program of the look denies (denied_by_programs over all).
  std::vector<WantedDevice> denied(const std::vector<WantedDevice>& wanted) const;
};
// `kept`: the container directories kept open between looks (kept_cgroup_dirs.h); nullptr:
// opened for this look alone.
Result<DeviceProgramsSnapshot> snapshot_device_programs(const std::string& cgroup_dir, DeviceProgramCache& cache,
                                                        KeptCgroupDirs* kept = nullptr);
// A look at one program the probe saw attached to the container's own cgroup in
// `attach_flags`' mode: that cgroup, through its kept directory, with that program alone
// described in it; nullopt when the program is gone already (then only a whole look tells).
// No query: what else is attached is read after a grant from it.
Result<std::optional<DeviceProgramsSnapshot>> snapshot_attached_program(const std::string& cgroup_dir,
                                                                        std::uint32_t prog_id,
                                                                        std::uint32_t attach_flags,
                                                                        DeviceProgramCache& cache, KeptCgroupDirs& kept);
// The same for a one-shot look (a cache of its own).
Result<std::vector<AttachedDeviceProgram>> query_device_programs(const std::string& cgroup_dir);

// The revision of the device programs attached to cgroup `dir` (Linux 6.17+: from 1 up);
// 0 on a kernel that keeps none.
Result<std::uint64_t> device_programs_revision(const std::string& dir);

// Does the ordered rule list allow `dev` with `access` (runc's filter semantics)?
bool oci_rules_allow(const std::vector<OciDeviceCgroupRule>& rules, const DeviceNumber& dev, std::uint8_t access);

// Does this program deny `want` (any request within its access)? A program whose run we
// cannot follow denies.
bool program_denies(const AttachedDeviceProgram& program, const WantedDevice& want);

// The wanted devices that the programs attached to a container's cgroup deny, without
// touching the container. A cgroup without programs denies nothing here (programs
// inherited from ancestors are not looked at).
std::vector<WantedDevice> denied_by_programs(const std::vector<AttachedDeviceProgram>& attached,
                                             const std::vector<WantedDevice>& wanted);
ProgramCounts count_by_owner(const std::vector<AttachedDeviceProgram>& programs);

struct UndetachedProgram {
  AttachedDeviceProgram program;
  std::string reason;  // "attached through a bpf_link", "it calls helpers ...", an errno text
};

// What a repair does, decided from a query alone (pure).
struct V2Plan {
  // The programs that deny a wanted device: each is replaced by our wrapper that adds
  // `added` (the wanted devices) to old.inner (wrap_device_program).
  struct Replacement {
    AttachedDeviceProgram old;
    std::vector<WantedDevice> added;
    // Other denying programs in the same cgroup with exactly old's instructions (a runtime's
    // and systemd's program for the same spec): the kernel attaches a program only once
    // per cgroup, so they are detached, and only once the wrapper is in old's place, which
    // then gives every verdict they give. Detached before, with old taken away meanwhile
    // by a re-applier that had recorded it, they would leave the cgroup with nothing.
    std::vector<AttachedDeviceProgram> twins;
  };
  std::vector<Replacement> replace;
  // Wrappers of ours attached before an identical one (same instructions, same devices
  // added): their removal takes away no restriction. The one attached last stays: it is
  // the one a repair just attached, never one a re-applier recorded before its attach and
  // may still detach. This is how systemd's daemon-reload is answered without piling up
  // wrappers: it attaches the same program again, since the previous one, which we
  // replaced, is no longer its to detach.
  std::vector<AttachedDeviceProgram> detach;
  std::vector<UndetachedProgram> leave;   // deny one too, but cannot be replaced by us
};
V2Plan plan_v2_repair(const std::vector<AttachedDeviceProgram>& attached, const std::vector<WantedDevice>& wanted);
// A grant's later rounds (after a swap, or a swap refused as stale) act only on programs
// its first look could have been decided on. A denying program loaded after every program
// that look saw (a higher id: the kernel's ids count up) was attached while the grant ran,
// by a writer whose record the daemon has not read: maybe a runtime inside its apply (runc
// 1.0.0~rc93's update under systemd attaches its own program right after systemd's
// re-apply). It is left out, and its twins with it: the grant reports its devices as
// denied again (EAGAIN, looked at again after repair.raced_retry), once its record has
// said who attached it. `newest_seen_first`: the highest id the first look saw.
void leave_newcomers(V2Plan& plan, std::uint32_t newest_seen_first);

struct V2Repair {
  struct Replaced {
    std::uint32_t old_id = 0;
    std::uint32_t new_id = 0;
    bool atomic = true;  // BPF_F_REPLACE; false: attached ours, then detached the old one
  };
  std::vector<Replaced> replaced;
  // Programs that deny a wanted device and are still attached (link-attached, not
  // wrappable, or a detach failed).
  std::vector<UndetachedProgram> left_attached;
  std::vector<AttachedDeviceProgram> now;    // attached after the repair
  std::vector<WantedDevice> still_denied;    // by `now`
  // Of those, the ones only programs that cannot be replaced (left_attached) deny: the
  // others were denied again by a program attached after the last round (a re-applier
  // still at work), which its own attach event or the next look answers.
  std::vector<WantedDevice> refused;
  std::size_t detached = 0;  // programs detached beside a wrapper running their code
  // Swaps and detaches that carried the revision their query read (expected_revision), and
  // of those, the ones the kernel refused as stale (ESTALE: the cgroup's programs changed
  // since): each was decided again at once on a fresh query.
  std::size_t checked = 0;
  std::size_t stale = 0;
};

// Replaces each program that denies a wanted device with our wrapper around it (see the
// top of this file), or detaches it where a wrapper of ours already runs its code (V2Plan),
// on the container's cgroup and on its crun sub-cgroup (as query_device_programs); every
// other program stays. Returns without touching anything when no program denies a wanted
// device. A program attached or detached meanwhile (a re-applier at work) is decided on a
// fresh query, until none denies a wanted device that could be replaced, for up to
// kRepairRounds rounds. Errors: the cgroup cannot be opened or queried, a load the
// verifier rejects, a failed attach; each names the cgroup and the errno text.
inline constexpr int kRepairRounds = 8;
// A round's swaps and detaches carry the revision its query read, where the kernel keeps one
// (Linux 6.17+): a change to the cgroup by anyone else between the query and the act makes
// the kernel refuse it (ESTALE), and the repair queries again at once and decides afresh,
// without a back-off, at most kMaxStaleLooks times (they use up no round). A kernel
// without revisions (or RevisionCheck::kNever) acts as before: a swap names the program it
// replaces (BPF_F_REPLACE), and the next round's query sees whatever changed beside it.
inline constexpr int kMaxStaleLooks = 2 * kRepairRounds;
enum class RevisionCheck { kWhereKept, kNever };
// `seen`: a snapshot just taken (an observation microseconds ago) stands for each cgroup's
// first query; acting on it is safe however old it is (a program no longer where it was is
// not replaced, a revision changed since is refused, and the next round queries again).
Result<V2Repair> repair_device_programs(const std::string& cgroup_dir, const std::vector<WantedDevice>& wanted,
                                       DeviceProgramCache& cache, const DeviceProgramsSnapshot* seen = nullptr,
                                       RevisionCheck check = RevisionCheck::kWhereKept);
// The same for a one-shot repair (a cache of its own; the wrappers stay attached).
Result<V2Repair> repair_device_programs(const std::string& cgroup_dir, const std::vector<WantedDevice>& wanted);

}  // namespace gdw
