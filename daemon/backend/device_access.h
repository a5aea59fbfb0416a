// One interface to a container's device policy, whatever enforces it: observe what the
// container is missing, grant what it should have. The repair loop (service/repair_step.h)
// and everything above it go through this and never ask which cgroup version runs.
//
// Implementations: cgroup v1's devices controller (devices.list / devices.allow) and
// cgroup v2's device programs (device_programs_v2.h: the programs that deny a wanted device
// are wrapped, the others stay). Persisting grants in a systemd scope's DeviceAllow= is a
// step after either (systemd_scope.h), planned by core/repair_plan.h.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "backend/device_programs_v2.h"
#include "core/config.h"
#include "core/desired_state.h"
#include "core/repair_plan.h"
#include "core/result.h"

namespace gdw {

struct DeviceState {
  std::vector<WantedDevice> missing;      // wanted devices the policy denies now
  std::optional<ProgramCounts> programs;  // device programs attached, by owner (none on v1);
                                          // nullopt after a look at one program alone
};

// A device program the probe saw attached to a container's own cgroup (not crun's
// sub-cgroup of it): its id and the attach's flags (BPF_F_ALLOW_MULTI ...).
struct AttachedProgram {
  std::uint32_t prog_id = 0;
  std::uint32_t attach_flags = 0;
};

struct GrantReport {
  std::vector<DeviceOutcome> devices;  // one per device asked for, in order
  std::string method;                  // metric label: "cgroupfs", "bpf"
  // What was changed beyond the outcomes, for a person ("1 device program(s) wrapped; ..."),
  // and what stays in the way (a program that cannot be replaced): logged as warnings.
  std::string summary;
  std::vector<std::string> warnings;
  std::size_t programs_replaced = 0;
  std::size_t programs_loaded = 0;  // v2: wrappers loaded while the grant ran (a verifier run each)
  // v2 (Linux 6.17+): swaps and detaches the kernel refused because the cgroup's programs
  // changed after the query they were decided on (ESTALE); each was looked at again at once.
  std::size_t stale_swaps = 0;
  std::optional<ProgramCounts> programs_now;  // by owner, when the grant re-read them
  std::optional<Error> failure;  // the whole grant failed (the outcomes carry it too)
};

class DeviceAccess {
 public:
  virtual ~DeviceAccess() = default;

  // "cgroup v1 devices", "cgroup v2 device programs".
  virtual std::string description() const = 0;
  // What observe() reads, as the event-loop error metric names it: "devices.list",
  // "device-programs".
  virtual std::string observed_source() const = 0;
  // Files of a container's cgroup whose writes can take devices away (inotify watches
  // them); none where the policy is not in files.
  virtual std::vector<std::string> rule_files() const = 0;
  // Files whose writes can only add: no look is needed after them (our own grants among
  // them), except while the container misses devices (observe mode, a refused or held-back
  // grant), when someone else's grant ends the drift.
  virtual std::vector<std::string> restoring_rule_files() const { return {}; }
  // Whether the policy is in device programs: program loads, attaches and systemd's
  // reloads change it without a file write, so it is re-read on those and periodically.
  virtual bool policy_in_programs() const = 0;
  // v2: whether repairs' swaps carry the revision of the query they were decided on (the
  // kernel refuses them when the cgroup changed since: Linux 6.17+), read from a query of
  // `cgroup_dir`; nullopt where the policy is not in programs or the query failed.
  virtual std::optional<bool> swaps_check_revision(const std::string& cgroup_dir) const {
    (void)cgroup_dir;
    return std::nullopt;
  }
  // The hierarchy id the probe's cgroup_mkdir events carry for this tree (cgroup2: 0; a v1
  // controller's from <proc_root>/cgroups).
  virtual Result<std::uint32_t> hierarchy_id(const std::string& proc_root) const = 0;

  // Errors say what could not be read; their code is ENOENT when the cgroup is gone.
  virtual Result<DeviceState> observe(const std::string& cgroup_dir, const DesiredDevices& desired) = 0;
  // observe() after the probe saw `attached` put on the container's cgroup. v2 looks at
  // that program alone when it denies wanted devices (the query of every program attached
  // waits until after the grant, which ends with one); `missing` then holds what it
  // denies, and `programs` is not known. Otherwise, and elsewhere, the whole observe().
  virtual Result<DeviceState> observe_attached(const std::string& cgroup_dir, const DesiredDevices& desired,
                                               const AttachedProgram& attached) {
    (void)attached;
    return observe(cgroup_dir, desired);
  }
  // Grants `devices` (some of `wanted`, all it should have) and nothing else.
  virtual GrantReport grant(const std::string& cgroup_dir, const std::vector<WantedDevice>& wanted,
                            const std::vector<WantedDevice>& devices) = 0;
  // The container is no longer watched: release what was kept for it (open files).
  virtual void forget(const std::string& cgroup_dir) { (void)cgroup_dir; }
  // After a grant is reported: work that makes the next grant faster (v2: loading a spare
  // wrapper copy, or a wrapper ahead for another device set), kept off the path between an
  // event and its grant, a bounded step per call; due says whether there is any left.
  // Returns the device programs it loaded.
  virtual bool next_grant_work_due() const { return false; }
  virtual std::size_t prepare_next_grant() { return 0; }
  // While a check waits for the runtime that attached `attached` to a container's cgroup to
  // end its apply (a grant then would break it): what the grant that follows would read
  // first is read now (v2: that program, ~15 µs of bpf() calls and decoding on a 2-vCPU VM),
  // and the wrapper it would load for `wanted` is loaded off the event loop
  // (DeviceProgramCache::load_off_loop), so that the grant's attach comes sooner after the
  // runtime's exit. Nothing is attached or written.
  virtual void prepare_grant(const AttachedProgram& attached, const std::vector<WantedDevice>& wanted) {
    (void)attached;
    (void)wanted;
  }
  // Takes in what prepare_grant() had loaded off the loop (a grant takes it in too);
  // returns how many programs were loaded that way so far.
  virtual std::size_t adopt_prepared() { return 0; }
};

// The node's: `version` is what NodeModel located (kV1 or kV2).
std::unique_ptr<DeviceAccess> make_device_access(CgroupVersion version);

}  // namespace gdw
