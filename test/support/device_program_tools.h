// What other managers do to a cgroup's v2 device programs, and what the kernel holds, with
// raw bpf() calls: independent of the daemon's backend (daemon/backend), so tests judge
// the daemon by what the kernel enforces and holds, not by its own reading.
//
// The re-appliers, as cgroups-and-runtimes.md describes them:
//  - runc: a new program from the spec; BPF_F_REPLACE when exactly one program is
//    attached, else attach (BPF_F_ALLOW_MULTI) and detach all the old ones.
//  - systemd (daemon-reload, SetUnitProperties): a new `sd_devices` from DeviceAllow=,
//    attached with BPF_F_ALLOW_MULTI; then it detaches only its own previous program
//    (gone when someone replaced it: then it stays where it is).
//  - libnvidia-container's grant (nvcgo AddDeviceRules): each attached program is copied
//    with "allow the GPU nodes" in front, the copy attached unnamed, the old one detached.
#pragma once

#include <linux/bpf.h>
#include <sys/types.h>

#include <chrono>
#include <cstdint>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "runtime/oci_config.h"

namespace gdw::test {

struct AttachedProgramInfo {
  std::uint32_t id = 0;
  std::string name;  // bpf_prog_info.name; "" for an unnamed program
};

// Programs attached to the cgroup directory itself (BPF_CGROUP_DEVICE), in the kernel's
// order. *err: 0, or the errno of the open/query.
std::vector<AttachedProgramInfo> attached_device_programs(const std::string& cgroup_dir, int* err = nullptr);
// "[12 sd_devices, 15 -]": for failure messages and printed summaries.
std::string describe(const std::vector<AttachedProgramInfo>& programs);
// Detaches program `id` from the cgroup; returns errno (ENOENT: not attached there or gone).
int detach_device_program(const std::string& cgroup_dir, std::uint32_t id);

// runc's re-apply of `rules`; returns errno (0 = the new program is in force).
int runc_style_reapply(const std::string& cgroup_dir, const std::vector<OciDeviceCgroupRule>& rules);

// systemd's re-apply for one unit: remembers its own last program per cgroup (by id, as
// the kernel names it; systemd keeps an fd, which detaches the same program).
class SystemdStyleReapplier {
 public:
  // Attaches a new `sd_devices` for `rules`, then detaches this unit's previous one.
  // Returns errno of the load or attach (0 = attached); a failed detach is not an error.
  int reapply(const std::string& cgroup_dir, const std::vector<OciDeviceCgroupRule>& rules);
  void forget(const std::string& cgroup_dir) { last_.erase(cgroup_dir); }

 private:
  std::map<std::string, std::uint32_t> last_;
};

// libnvidia-container's grant of `allowed` on v2; returns errno (0 = every attached
// program was swapped for its copy).
int nvidia_style_grant(const std::string& cgroup_dir, const std::vector<DeviceRule>& allowed);

// Ids of every loaded program of `type` (bpf_prog_get_next_id over the whole kernel); only
// those called `name` unless it is empty.
std::set<std::uint32_t> loaded_program_ids(bpf_prog_type type, const std::string& name = "");
// Ids of the device programs attached to any cgroup below `cgroup2_root`
// (/sys/fs/cgroup/unified), the root included.
std::set<std::uint32_t> attached_program_ids_below(const std::string& cgroup2_root);

// A runtime's program that allows every device: a re-apply that revokes nothing, for tests
// that only look at who loaded and attached it.
inline const std::vector<OciDeviceCgroupRule> kAllowAllRules = {
    {true, DeviceRule{DeviceType::kAll, kAnyNumber, kAnyNumber, kAccessAll}}};

// How attach_as()'s child attaches: by default from this process's cgroup, at once.
struct AttachAs {
  bool from_inside = false;  // the child joins `cgroup_dir` first (a tenant re-applying its own)
  std::chrono::milliseconds after_load{0};  // the child's pause between its load and its attach
  // Loads first, each program closed at once, from two attrs in turn, as a tenant flooding
  // the probe with loads would (the probe's per-thread dedup of one attr does not catch it).
  int extra_loads = 0;
  bool then_attach = true;  // false: the child only loads (an attach that never comes)
  int cpu = -1;             // >= 0: the child runs on this CPU only (sched_setaffinity)
};
// From a child process that names itself `comm` (prctl PR_SET_NAME, as a runtime binary of
// that name would be seen), loads `rules` as a program and attaches it to `cgroup_dir`
// (BPF_F_ALLOW_MULTI; unless AttachAs::then_attach is false). Returns 0, the errno of the
// step that failed, or -1.
int attach_as(const char* comm, const std::string& cgroup_dir, const std::vector<OciDeviceCgroupRule>& rules,
              AttachAs how = {});
// The same for cgroup v1: the child writes `rule` to <cgroup_dir>/devices.deny.
int deny_as(const char* comm, const std::string& cgroup_dir, const std::string& rule);

}  // namespace gdw::test
