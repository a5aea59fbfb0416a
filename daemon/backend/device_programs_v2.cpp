// The kernel half of device_programs_v2.h: bpf(2) queries, our device_filter program
// (bpf/device_filter.bpf.c) loaded with a rule list, attach/replace/detach.
#include "backend/device_programs_v2.h"

#include <bpf/bpf.h>
#include <bpf/libbpf.h>
#include <fcntl.h>
#include <linux/bpf.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstddef>
#include <cstring>
#include <memory>
#include <set>
#include <string_view>

// clang-format off: the skeleton names its rodata struct after device_filter.h's types.
#include "device_filter.h"
#include "device_filter.skel.h"
// clang-format on

namespace gdw {
namespace {

using RodataLayout = device_filter::device_filter__rodata;
static_assert(GDW_DEVICE_FILTER_MAX_RULES == kMaxProgramRules);

std::string errno_text(int err) { return std::strerror(err < 0 ? -err : err); }

// An owned file descriptor (cgroup directory, program, map, link).
class OwnedFd {
 public:
  explicit OwnedFd(int fd = -1) : fd_(fd) {}
  ~OwnedFd() {
    if (fd_ >= 0) ::close(fd_);
  }
  OwnedFd(OwnedFd&& o) noexcept : fd_(o.fd_) { o.fd_ = -1; }
  OwnedFd& operator=(OwnedFd&& o) noexcept {
    std::swap(fd_, o.fd_);
    return *this;
  }
  OwnedFd(const OwnedFd&) = delete;
  OwnedFd& operator=(const OwnedFd&) = delete;
  int get() const { return fd_; }
  bool valid() const { return fd_ >= 0; }

 private:
  int fd_;
};

struct SkeletonDeleter {
  void operator()(device_filter* skeleton) const { device_filter::destroy(skeleton); }
};
using Skeleton = std::unique_ptr<device_filter, SkeletonDeleter>;

ProgramOwner owner_of(std::string_view name) {
  if (name == kOurProgramName) return ProgramOwner::kOurs;
  if (name == "sd_devices") return ProgramOwner::kSystemd;
  return ProgramOwner::kRuntime;
}

Result<OwnedFd> open_cgroup(const std::string& dir) {
  OwnedFd fd(::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
  if (!fd.valid()) return Error{"opening cgroup " + dir + ": " + errno_text(errno)};
  return fd;
}

struct AttachedIds {
  std::vector<std::uint32_t> ids;
  std::uint32_t attach_flags = 0;  // the cgroup's mode for this attach type
};

Result<AttachedIds> query_ids(int cgroup_fd, const std::string& dir) {
  AttachedIds out;
  std::vector<std::uint32_t> ids(16);
  for (;;) {
    auto count = static_cast<std::uint32_t>(ids.size());
    if (bpf_prog_query(cgroup_fd, BPF_CGROUP_DEVICE, 0, &out.attach_flags, ids.data(), &count) == 0) {
      ids.resize(count);
      out.ids = std::move(ids);
      return out;
    }
    // ENOSPC: more programs than room; the kernel reported how many there are.
    if (errno != ENOSPC || count <= ids.size())
      return Error{"querying the device programs of " + dir + ": " + errno_text(errno)};
    ids.resize(count);
  }
}

// Program ids attached to the cgroup through bpf_links of type BPF_CGROUP_DEVICE. The
// cgroup v2 id is the directory's inode number.
std::set<std::uint32_t> link_attached_program_ids(const std::string& dir) {
  std::set<std::uint32_t> ids;
  struct stat st {};
  if (::stat(dir.c_str(), &st) != 0) return ids;
  std::uint32_t link_id = 0;
  while (bpf_link_get_next_id(link_id, &link_id) == 0) {
    OwnedFd link(bpf_link_get_fd_by_id(link_id));
    if (!link.valid()) continue;  // released meanwhile
    bpf_link_info info{};
    std::uint32_t len = sizeof(info);
    if (bpf_obj_get_info_by_fd(link.get(), &info, &len) != 0) continue;
    if (info.type == BPF_LINK_TYPE_CGROUP && info.cgroup.cgroup_id == st.st_ino &&
        info.cgroup.attach_type == BPF_CGROUP_DEVICE)
      ids.insert(info.prog_id);
  }
  return ids;
}

OciDeviceCgroupRule from_filter_rule(const gdw_device_filter_rule& r) {
  DeviceRule rule;
  rule.type = r.type == GDW_DEVICE_FILTER_TYPE_CHAR    ? DeviceType::kChar
              : r.type == GDW_DEVICE_FILTER_TYPE_BLOCK ? DeviceType::kBlock
                                                       : DeviceType::kAll;
  rule.major = r.major == GDW_DEVICE_FILTER_ANY ? kAnyNumber : r.major;
  rule.minor = r.minor == GDW_DEVICE_FILTER_ANY ? kAnyNumber : r.minor;
  rule.access = static_cast<std::uint8_t>(r.access & kAccessAll);
  return {r.allow != 0, rule};
}

gdw_device_filter_rule to_filter_rule(const OciDeviceCgroupRule& r) {
  gdw_device_filter_rule out{};
  out.type = r.rule.type == DeviceType::kChar    ? GDW_DEVICE_FILTER_TYPE_CHAR
             : r.rule.type == DeviceType::kBlock ? GDW_DEVICE_FILTER_TYPE_BLOCK
                                                 : GDW_DEVICE_FILTER_TYPE_ALL;
  out.major = r.rule.major == kAnyNumber ? GDW_DEVICE_FILTER_ANY : r.rule.major;
  out.minor = r.rule.minor == kAnyNumber ? GDW_DEVICE_FILTER_ANY : r.rule.minor;
  out.access = r.rule.access;
  out.allow = r.allow ? 1 : 0;
  return out;
}

// The rules of one of our programs, from its frozen .rodata map.
std::optional<std::vector<OciDeviceCgroupRule>> read_program_rules(int prog_fd, std::uint32_t map_count) {
  if (map_count == 0) return std::nullopt;
  std::vector<std::uint32_t> map_ids(map_count);
  bpf_prog_info info{};
  info.nr_map_ids = map_count;
  info.map_ids = reinterpret_cast<std::uintptr_t>(map_ids.data());
  std::uint32_t len = sizeof(info);
  if (bpf_obj_get_info_by_fd(prog_fd, &info, &len) != 0) return std::nullopt;
  map_ids.resize(std::min(map_count, info.nr_map_ids));
  for (std::uint32_t map_id : map_ids) {
    OwnedFd map(bpf_map_get_fd_by_id(map_id));
    if (!map.valid()) continue;
    bpf_map_info map_info{};
    std::uint32_t map_len = sizeof(map_info);
    if (bpf_obj_get_info_by_fd(map.get(), &map_info, &map_len) != 0) continue;
    std::string_view name(map_info.name);
    if (!name.ends_with(".rodata") || map_info.value_size != sizeof(RodataLayout)) continue;
    auto value = std::make_unique<RodataLayout>();
    std::uint32_t key = 0;
    if (bpf_map_lookup_elem(map.get(), &key, value.get()) != 0) continue;
    const auto& set = value->rule_set;
    if (set.rule_count > GDW_DEVICE_FILTER_MAX_RULES) return std::nullopt;
    std::vector<OciDeviceCgroupRule> rules;
    rules.reserve(set.rule_count);
    for (std::uint32_t i = 0; i < set.rule_count; ++i) rules.push_back(from_filter_rule(set.rules[i]));
    return rules;
  }
  return std::nullopt;
}

// nullopt when the program went away between the query and now.
std::optional<AttachedDeviceProgram> describe_program(std::uint32_t id, const std::set<std::uint32_t>& link_ids) {
  OwnedFd fd(bpf_prog_get_fd_by_id(id));
  if (!fd.valid()) return std::nullopt;
  bpf_prog_info info{};
  std::uint32_t len = sizeof(info);
  if (bpf_obj_get_info_by_fd(fd.get(), &info, &len) != 0) return std::nullopt;
  AttachedDeviceProgram p;
  p.id = id;
  p.name = info.name;
  p.owner = owner_of(p.name);
  p.link = link_ids.count(id) != 0;
  if (p.owner == ProgramOwner::kOurs) p.rules = read_program_rules(fd.get(), info.nr_map_ids);
  return p;
}

Result<std::vector<AttachedDeviceProgram>> describe_attached(int cgroup_fd, const std::string& dir,
                                                             AttachedIds* ids_out = nullptr) {
  auto ids = query_ids(cgroup_fd, dir);
  if (!ids) return ids.error();
  std::vector<AttachedDeviceProgram> programs;
  std::set<std::uint32_t> link_ids;
  if (!ids->ids.empty()) link_ids = link_attached_program_ids(dir);
  for (std::uint32_t id : ids->ids)
    if (auto p = describe_program(id, link_ids)) programs.push_back(std::move(*p));
  if (ids_out) *ids_out = std::move(*ids);
  return programs;
}

Result<Skeleton> load_union_program(const std::vector<OciDeviceCgroupRule>& rules, const std::string& dir) {
  // The verifier's log only comes back on a failed load (libbpf retries with logging).
  std::string log(64 * 1024, '\0');
  bpf_object_open_opts opts{};
  opts.sz = sizeof(opts);
  opts.kernel_log_buf = log.data();
  opts.kernel_log_size = log.size();
  Skeleton skeleton(device_filter::open(&opts));
  if (!skeleton) return Error{"opening the device filter BPF object for " + dir + ": " + errno_text(errno)};
  auto& set = skeleton->rodata->rule_set;
  set.rule_count = static_cast<__u32>(rules.size());
  for (std::size_t i = 0; i < rules.size(); ++i) set.rules[i] = to_filter_rule(rules[i]);
  if (int err = device_filter::load(skeleton.get()); err != 0) {
    std::string verifier(log.c_str());
    if (verifier.size() > 600) verifier = "..." + verifier.substr(verifier.size() - 600);
    return Error{"loading the device filter program for " + dir + ": " + errno_text(err) +
                 (verifier.empty() ? "" : " (verifier: " + verifier + ")")};
  }
  return skeleton;
}

std::uint32_t program_id(int prog_fd) {
  bpf_prog_info info{};
  std::uint32_t len = sizeof(info);
  return bpf_obj_get_info_by_fd(prog_fd, &info, &len) == 0 ? info.id : 0;
}

std::string attach_error(const std::string& dir, int err) {
  std::string text = "attaching the device filter program to " + dir + ": " + errno_text(err);
  if (err == EPERM)
    text += " (the cgroup or an ancestor holds a device program attached without BPF_F_ALLOW_MULTI)";
  return text;
}

// Detaches every program but ours (attach-then-detach path). Works on a fresh query, so a
// program attached while we were loading ours is replaced too; `before` (the query that
// led here) stands in if that query fails.
void detach_others(int cgroup_fd, const std::string& dir, std::uint32_t ours,
                   const std::vector<AttachedDeviceProgram>& before, V2Repair& repair) {
  auto fresh = describe_attached(cgroup_fd, dir);
  const auto& programs = fresh ? *fresh : before;
  for (const auto& p : programs) {
    if (p.id == ours) continue;
    if (p.link) {
      repair.left_attached.push_back({p, "attached through a bpf_link: only its link can detach it"});
      continue;
    }
    OwnedFd fd(bpf_prog_get_fd_by_id(p.id));
    if (!fd.valid()) continue;  // gone meanwhile
    if (bpf_prog_detach2(fd.get(), cgroup_fd, BPF_CGROUP_DEVICE) == 0) {
      repair.detached_ids.push_back(p.id);
    } else if (errno != ENOENT) {  // ENOENT: someone else detached it first
      repair.left_attached.push_back({p, "detaching it from " + dir + ": " + errno_text(errno)});
    }
  }
}

}  // namespace

Result<std::vector<AttachedDeviceProgram>> query_device_programs(const std::string& cgroup_dir) {
  auto cgroup = open_cgroup(cgroup_dir);
  if (!cgroup) return cgroup.error();
  return describe_attached(cgroup->get(), cgroup_dir);
}

Result<V2Repair> install_union_program(const std::string& cgroup_dir, const std::vector<OciDeviceCgroupRule>& spec,
                                       const std::vector<WantedDevice>& desired) {
  const auto rules = union_rules(spec, desired);
  if (rules.size() > kMaxProgramRules)
    return Error{"device rules for " + cgroup_dir + ": " + std::to_string(rules.size()) +
                 " rules (spec and desired devices) exceed the device filter's limit of " +
                 std::to_string(kMaxProgramRules)};
  auto cgroup = open_cgroup(cgroup_dir);
  if (!cgroup) return cgroup.error();
  auto skeleton = load_union_program(rules, cgroup_dir);
  if (!skeleton) return skeleton.error();
  const int prog_fd = bpf_program__fd((*skeleton)->progs.gdw_devices);
  V2Repair repair;
  repair.attached_id = program_id(prog_fd);

  // A REPLACE names the program it replaces; if that one is detached by someone else
  // between our query and our attach, the kernel says ENOENT and we decide again.
  for (int attempt = 0; attempt < 3; ++attempt) {
    AttachedIds ids;
    auto attached = describe_attached(cgroup->get(), cgroup_dir, &ids);
    if (!attached) return attached.error();
    if (!ids.ids.empty() && (ids.attach_flags & BPF_F_ALLOW_MULTI) == 0)
      return Error{"cannot replace the device programs of " + cgroup_dir + ": program " +
                   std::to_string(ids.ids.front()) +
                   " is attached without BPF_F_ALLOW_MULTI (an old runtime); not replaced"};

    if (attached->size() == 1 && !attached->front().link) {
      const auto& old = attached->front();
      OwnedFd old_fd(bpf_prog_get_fd_by_id(old.id));
      if (!old_fd.valid()) continue;  // detached meanwhile: decide again
      struct bpf_prog_attach_opts opts {};
      opts.sz = sizeof(opts);
      opts.flags = BPF_F_ALLOW_MULTI | BPF_F_REPLACE;
      opts.replace_prog_fd = old_fd.get();
      if (bpf_prog_attach_opts(prog_fd, cgroup->get(), BPF_CGROUP_DEVICE, &opts) == 0) {
        repair.used_replace = true;
        repair.detached_ids.push_back(old.id);
        return repair;
      }
      if (errno == ENOENT) continue;
      return Error{attach_error(cgroup_dir, errno) + " (replacing program " + std::to_string(old.id) + ")"};
    }

    struct bpf_prog_attach_opts opts {};
    opts.sz = sizeof(opts);
    opts.flags = BPF_F_ALLOW_MULTI;
    if (bpf_prog_attach_opts(prog_fd, cgroup->get(), BPF_CGROUP_DEVICE, &opts) != 0)
      return Error{attach_error(cgroup_dir, errno)};
    detach_others(cgroup->get(), cgroup_dir, repair.attached_id, *attached, repair);
    return repair;
  }
  return Error{"replacing the device program of " + cgroup_dir +
               ": the attached program kept changing under us (3 attempts)"};
}

}  // namespace gdw
