#include "backend/device_access.h"

#include <linux/bpf.h>
#include <sys/resource.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cerrno>
#include <unordered_set>

#include "backend/device_program_cache.h"
#include "backend/devices_v1_files.h"
#include "backend/kept_cgroup_dirs.h"
#include "runtime/cgroup_names.h"
#include "runtime/proc_cgroups.h"

namespace gdw {
namespace {

// How many containers' files DevicesV1 keeps open (two descriptors each), or directories
// DeviceProgramsV2 keeps (one each): what a node's GPU containers need, within a quarter of
// the descriptors this process may have (the unit sets LimitNOFILE=65536; a default 1024
// still leaves most for inotify, gRPC and HTTP).
std::size_t kept_cgroups() {
  constexpr std::size_t kEnough = 1024;
  struct rlimit limit{};
  if (::getrlimit(RLIMIT_NOFILE, &limit) != 0 || limit.rlim_cur == RLIM_INFINITY) return kEnough;
  return std::min<std::size_t>(kEnough, static_cast<std::size_t>(limit.rlim_cur) / 8);
}

class DevicesV1 final : public DeviceAccess {
 public:
  std::string description() const override { return "cgroup v1 devices"; }
  std::string observed_source() const override { return "devices.list"; }
  std::vector<std::string> rule_files() const override { return {"devices.deny"}; }
  // A write to devices.allow only ever adds an exception (or lifts a deny one): it cannot
  // take a device away.
  std::vector<std::string> restoring_rule_files() const override { return {"devices.allow"}; }
  bool policy_in_programs() const override { return false; }
  Result<std::uint32_t> hierarchy_id(const std::string& proc_root) const override {
    return read_v1_hierarchy_id(proc_root, "devices");
  }

  Result<DeviceState> observe(const std::string& cgroup_dir, const DesiredDevices& desired) override {
    auto raw = files_.read_list(cgroup_dir);
    if (!raw) return raw.error();
    auto list = parse_devices_list(*raw);
    if (!list) return with_context("cannot read devices.list", list.error());
    return DeviceState{missing_devices(desired, *list), {}};
  }

  GrantReport grant(const std::string& cgroup_dir, const std::vector<WantedDevice>&,
                    const std::vector<WantedDevice>& devices) override {
    GrantReport report;
    report.method = "cgroupfs";
    auto outcomes = files_.write_grants(cgroup_dir, grant_rules(devices));
    report.devices.reserve(devices.size());
    for (std::size_t i = 0; i < devices.size(); ++i) report.devices.push_back({devices[i], std::move(outcomes[i])});
    return report;
  }

  void forget(const std::string& cgroup_dir) override { files_.forget(cgroup_dir); }

 private:
  DevicesV1Files files_{kept_cgroups()};
};

std::string describe(const V2Repair& r) {
  std::string s = std::to_string(r.replaced.size()) + " device program(s) wrapped";
  for (const auto& rep : r.replaced)
    s += "; " + std::to_string(rep.old_id) + " -> " + std::to_string(rep.new_id) +
         (rep.atomic ? " (atomic replace)" : " (attached, then detached)");
  if (r.detached)
    s += "; " + std::to_string(r.detached) + " detached beside a wrapper of ours that runs the same instructions";
  for (const auto& left : r.left_attached)
    s += "; program " + std::to_string(left.program.id) + " left attached: " + left.reason;
  return s;
}

class DeviceProgramsV2 final : public DeviceAccess {
 public:
  std::string description() const override { return "cgroup v2 device programs"; }
  std::string observed_source() const override { return "device-programs"; }
  std::vector<std::string> rule_files() const override { return {}; }
  bool policy_in_programs() const override { return true; }
  Result<std::uint32_t> hierarchy_id(const std::string&) const override { return 0u; }
  std::optional<bool> swaps_check_revision(const std::string& cgroup_dir) const override {
    auto revision = device_programs_revision(cgroup_dir);
    if (!revision) return std::nullopt;
    return *revision != 0;
  }

  Result<DeviceState> observe(const std::string& cgroup_dir, const DesiredDevices& desired) override {
    seen_.reset();
    auto snapshot = snapshot_device_programs(cgroup_dir, cache_, &dirs_);
    if (!snapshot) {
      // The query's error names the cgroup; a vanished cgroup is told apart by the directory.
      const int code = ::access(cgroup_dir.c_str(), F_OK) != 0 ? ENOENT : 0;
      return errno_error(code, "cannot query the device programs: " + snapshot.error().message);
    }
    // A grant from a look at one program would not see crun's sub-cgroup.
    if (snapshot->cgroups.size() == 1) without_subgroup_.insert(cgroup_dir);
    else without_subgroup_.erase(cgroup_dir);
    DeviceState state;
    state.programs = snapshot->count_by_owner();
    state.missing = snapshot->denied(desired.wanted);
    // A grant follows at once when something is missing: it starts from this look, and
    // records what the container wants once its devices are back.
    if (!state.missing.empty()) seen_ = Seen{cgroup_dir, std::move(*snapshot)};
    else cache_.wanted_sets().want(cgroup_dir, desired.wanted);
    return state;
  }

  // Only in BPF_F_ALLOW_MULTI mode, where the grant's swap names the program it replaces
  // (BPF_F_REPLACE): whatever else happened to the cgroup meanwhile, the wrapper takes that
  // program's place alone. The grant's own query afterwards finds anything else denying.
  Result<DeviceState> observe_attached(const std::string& cgroup_dir, const DesiredDevices& desired,
                                       const AttachedProgram& attached) override {
    if (!(attached.attach_flags & BPF_F_ALLOW_MULTI) || !without_subgroup_.contains(cgroup_dir) ||
        replaced_lately(attached.prog_id))
      return observe(cgroup_dir, desired);
    seen_.reset();
    auto one = snapshot_attached_program(cgroup_dir, attached.prog_id, attached.attach_flags, cache_, dirs_);
    if (!one || !*one) return observe(cgroup_dir, desired);
    DeviceState state;
    state.missing = (*one)->denied(desired.wanted);
    // Taking nothing wanted away, it cannot tell whether the container is whole.
    if (state.missing.empty()) return observe(cgroup_dir, desired);
    cache_.assume_still_attached(cgroup_dir, Clock::now());
    seen_ = Seen{cgroup_dir, std::move(**one), /*one_program=*/true};
    return state;
  }

  // The next repair's wrapper copy, and wrappers of a program just met for the other
  // containers' device sets, loaded after this repair (on the owner's timer) rather than
  // while a repair waits.
  bool next_grant_work_due() const override { return cache_.spares_due(); }
  std::size_t prepare_next_grant() override { return cache_.load_spares(Clock::now()); }

  // A program the runtime attached, read while it is attached: the grant's look at it
  // (observe_attached) finds it in the cache, and the wrapper it would load is on its way.
  void prepare_grant(const AttachedProgram& attached, const std::vector<WantedDevice>& wanted) override {
    const auto described = cache_.describe(attached.prog_id);
    if (!described) return;
    for (const auto& r : plan_v2_repair({*described}, wanted).replace)
      cache_.load_off_loop(r.added, r.old.inner, Clock::now());
  }
  std::size_t adopt_prepared() override {
    cache_.adopt_off_loop();
    return cache_.off_loop_loads();
  }

  // Each program denying a wanted device is wrapped (it then allows the wanted devices and
  // decides as before for the rest); the others stay as they are.
  GrantReport grant(const std::string& cgroup_dir, const std::vector<WantedDevice>& wanted,
                    const std::vector<WantedDevice>& devices) override {
    GrantReport report;
    report.method = "bpf";
    const DeviceProgramsSnapshot* seen = seen_ && seen_->dir == cgroup_dir ? &seen_->snapshot : nullptr;
    const std::size_t loads_before = cache_.wrapper_loads();
    auto installed = repair_device_programs(cgroup_dir, wanted, cache_, seen);
    if (!installed && seen && seen_->one_program) {
      // From a look at one program, which saw nothing else: its kept directory may be of a
      // cgroup gone or re-created, or the wrapper copy handed out is attached there already
      // (its sighting older than the cache keeps, and the kernel refuses a program twice in
      // one cgroup). A repair from a whole look, through the path, tells and finds another.
      dirs_.forget(cgroup_dir);
      installed = repair_device_programs(cgroup_dir, wanted, cache_, nullptr);
    }
    report.programs_loaded = cache_.wrapper_loads() - loads_before;
    if (installed)
      for (const auto& r : installed->replaced) replaced_ids_[replaced_next_++ % replaced_ids_.size()] = r.old_id;
    seen_.reset();
    cache_.wanted_sets().want(cgroup_dir, wanted);
    auto among = [](const std::vector<WantedDevice>& list, const WantedDevice& d) {
      return std::any_of(list.begin(), list.end(), [&](const WantedDevice& x) { return x.dev == d.dev; });
    };
    for (const auto& d : devices) {
      Status outcome;
      if (!installed) {
        outcome = errno_error(EPERM, installed.error().message);
      } else if (among(installed->refused, d)) {
        outcome = errno_error(EPERM, "still denied by a device program that cannot be replaced");
      } else if (among(installed->still_denied, d)) {
        // A re-applier attached again after the last round: its attach is answered next.
        outcome = errno_error(EAGAIN, "denied again by a device program attached during the repair");
      }
      report.devices.push_back({d, std::move(outcome)});
    }
    if (!installed) {
      report.failure = installed.error();
      return report;
    }
    report.summary = describe(*installed);
    report.programs_replaced = installed->replaced.size() + installed->detached;
    report.stale_swaps = installed->stale;
    report.programs_now = count_by_owner(installed->now);
    for (const auto& left : installed->left_attached)
      report.warnings.push_back("device program " + std::to_string(left.program.id) + " (" + left.program.name +
                                ") denies a wanted device and stays attached: " + left.reason);
    return report;
  }

  void forget(const std::string& cgroup_dir) override {
    dirs_.forget(cgroup_dir);
    without_subgroup_.erase(cgroup_dir);
    cache_.forget_cgroup(cgroup_dir);
    cache_.forget_cgroup(cgroup_dir + "/" + kCrunSubgroup);  // its queries are remembered too
    cache_.wanted_sets().forget(cgroup_dir);
  }

 private:
  DeviceProgramCache cache_;
  KeptCgroupDirs dirs_{kept_cgroups()};
  // The last observation that found something missing, for the grant that follows it.
  struct Seen {
    std::string dir;
    DeviceProgramsSnapshot snapshot;
    bool one_program = false;  // observe_attached's look
  };
  std::optional<Seen> seen_;
  // Containers whose last whole look found no crun sub-cgroup.
  std::unordered_set<std::string> without_subgroup_;
  // The programs our last grants took out: the attach hook reports one attach once per
  // cgroup below its target too, and a second record of an attach already repaired would
  // have a look at that one program ask for a grant the container no longer needs. Program
  // ids are not reused, and such records come microseconds apart.
  std::array<std::uint32_t, 64> replaced_ids_{};
  std::size_t replaced_next_ = 0;
  bool replaced_lately(std::uint32_t id) const {
    return std::find(replaced_ids_.begin(), replaced_ids_.end(), id) != replaced_ids_.end();
  }
};

}  // namespace

std::unique_ptr<DeviceAccess> make_device_access(CgroupVersion version) {
  if (version == CgroupVersion::kV2) return std::make_unique<DeviceProgramsV2>();
  return std::make_unique<DevicesV1>();
}

}  // namespace gdw
