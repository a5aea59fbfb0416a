// The kernel half of device_programs_v2.h, reading side: bpf(2) queries, each attached
// program's translated instructions, and the rule list of the union programs that
// earlier versions of the daemon attached (kept in their .rodata map).
#include "backend/device_programs_v2.h"

#include <bpf/bpf.h>
#include <fcntl.h>
#include <linux/bpf.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cerrno>
#include <cstring>
#include <map>
#include <memory>
#include <set>
#include <string_view>

#include "backend/cgroup_bpf_calls.h"
#include "backend/device_program_cache.h"
#include "backend/device_programs_v2_kernel.h"
#include "backend/kept_cgroup_dirs.h"
#include "runtime/cgroup_names.h"

namespace gdw {
namespace v2_kernel {

OwnedFd::~OwnedFd() {
  if (fd_ >= 0) ::close(fd_);
}

Result<OwnedFd> open_cgroup(const std::string& dir) {
  OwnedFd fd(::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
  if (!fd.valid()) return errno_error(errno, "opening cgroup " + dir + ": " + errno_text(errno));
  return fd;
}

std::vector<DeviceCgroup> device_cgroups_of(const std::string& container_dir) {
  std::vector<DeviceCgroup> cgroups{{container_dir, ""}};
  const std::string sub = container_dir + "/" + kCrunSubgroup;
  struct stat st {};
  if (::lstat(sub.c_str(), &st) == 0 && S_ISDIR(st.st_mode)) cgroups.push_back({sub, kCrunSubgroup});
  return cgroups;
}

namespace {

Result<AttachedIds> query_ids(int cgroup_fd, const std::string& dir) {
  AttachedIds out;
  std::vector<std::uint32_t> ids(16);
  for (;;) {
    cgroup_bpf::Query q;
    const int err = cgroup_bpf::query_device_programs(cgroup_fd, ids.data(), static_cast<std::uint32_t>(ids.size()), q);
    if (err == 0) {
      ids.resize(q.count);
      out.ids = std::move(ids);
      out.attach_flags = q.attach_flags;
      out.revision = q.revision;
      return out;
    }
    // ENOSPC: more programs than room; the kernel reported how many there are.
    // ENOENT: the cgroup was removed (the kernel refuses an offline one).
    if (err != ENOSPC || q.count <= ids.size())
      return errno_error(err, "querying the device programs of " + dir + ": " + errno_text(err));
    ids.resize(q.count);
  }
}

}  // namespace

// The cgroup v2 id is the directory's inode number.
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

namespace {

// The .rodata of the union program ("gdw_devices") that daemon versions before the
// wrapper attached: an ordered rule list in runc's semantics.
struct LegacyRule {
  std::uint32_t type;  // 0 any, 1 block, 2 char
  std::uint32_t major, minor;  // 0xffffffff: any
  std::uint32_t access;
  std::uint32_t allow;
};
constexpr std::uint32_t kLegacyMaxRules = 256;
struct LegacyRuleSet {
  std::uint32_t rule_count;
  std::uint32_t reserved;
  LegacyRule rules[kLegacyMaxRules];
};
static_assert(sizeof(LegacyRuleSet) == 8 + 256 * 20);

OciDeviceCgroupRule from_legacy_rule(const LegacyRule& r) {
  DeviceRule rule;
  rule.type = r.type == 2 ? DeviceType::kChar : r.type == 1 ? DeviceType::kBlock : DeviceType::kAll;
  rule.major = r.major;  // 0xffffffff is kAnyNumber in both
  rule.minor = r.minor;
  rule.access = static_cast<std::uint8_t>(r.access & kAccessAll);
  return {r.allow != 0, rule};
}

std::optional<std::vector<OciDeviceCgroupRule>> read_legacy_rules(int prog_fd, std::uint32_t map_count) {
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
    if (!std::string_view(map_info.name).ends_with(".rodata") || map_info.value_size != sizeof(LegacyRuleSet))
      continue;
    auto value = std::make_unique<LegacyRuleSet>();
    std::uint32_t key = 0;
    if (bpf_map_lookup_elem(map.get(), &key, value.get()) != 0) continue;
    if (value->rule_count > kLegacyMaxRules) return std::nullopt;
    std::vector<OciDeviceCgroupRule> rules;
    for (std::uint32_t i = 0; i < value->rule_count; ++i) rules.push_back(from_legacy_rule(value->rules[i]));
    return rules;
  }
  return std::nullopt;
}

// Room for the translated instructions in the first info call: runc's, crun's and
// systemd's programs are far shorter, so one call reads a program whole.
constexpr std::size_t kFirstReadInsns = 1024;

// The program's info and its translated instructions (empty when they could not be read).
std::optional<std::pair<bpf_prog_info, BpfCode>> read_info_and_code(int prog_fd) {
  // The first read lands in a buffer kept for it by the thread that reads (the event
  // loop's; a check command's): an 8 KiB allocation less on every program a reaction
  // reads. Allocated on first use, so that the daemon's other threads do not carry it.
  thread_local std::unique_ptr<std::array<bpf_insn, kFirstReadInsns>> kept_buffer;
  if (!kept_buffer) kept_buffer = std::make_unique<std::array<bpf_insn, kFirstReadInsns>>();
  std::array<bpf_insn, kFirstReadInsns>& first_read = *kept_buffer;
  bpf_prog_info info{};
  info.xlated_prog_len = static_cast<std::uint32_t>(sizeof first_read);
  info.xlated_prog_insns = reinterpret_cast<std::uintptr_t>(first_read.data());
  std::uint32_t len = sizeof(info);
  if (bpf_obj_get_info_by_fd(prog_fd, &info, &len) != 0) return std::nullopt;
  const std::uint32_t bytes = info.xlated_prog_len;  // the whole program's, however much was copied
  if (bytes == 0 || bytes % sizeof(bpf_insn) != 0) return std::pair{info, BpfCode{}};
  if (bytes <= sizeof first_read)
    return std::pair{info, BpfCode(first_read.begin(), first_read.begin() + bytes / sizeof(bpf_insn))};
  BpfCode code(bytes / sizeof(bpf_insn));  // longer: read again, whole
  bpf_prog_info again{};
  again.xlated_prog_len = bytes;
  again.xlated_prog_insns = reinterpret_cast<std::uintptr_t>(code.data());
  len = sizeof(again);
  if (bpf_obj_get_info_by_fd(prog_fd, &again, &len) != 0 || again.xlated_prog_len != bytes) code.clear();
  return std::pair{info, std::move(code)};
}

ProgramOwner owner_of(std::string_view name) {
  if (name == kOurProgramName) return ProgramOwner::kOurs;
  if (name == "sd_devices") return ProgramOwner::kSystemd;
  return ProgramOwner::kRuntime;
}

// Fills code, inner, wrapper and added from the program's instructions (or, for an older
// union program of ours, from its rule list).
void read_program_code(AttachedDeviceProgram& p, int prog_fd, const bpf_prog_info& info, BpfCode code) {
  if (p.owner == ProgramOwner::kOurs) {
    if (auto unwrapped = unwrap_device_program(code)) {
      p.wrapper = true;
      p.added = std::move(unwrapped->added);
      p.inner = std::move(unwrapped->inner);
      p.code = std::move(code);
    } else if (auto rules = read_legacy_rules(prog_fd, info.nr_map_ids)) {
      p.code = compile_device_rules(*rules);
      p.inner = p.code;
      return;
    } else {
      p.code = std::move(code);
      p.inner = p.code;
    }
  } else {
    p.code = std::move(code);
    p.inner = p.code;
  }
  if (auto why = not_reloadable(p.inner)) {
    p.unwrappable = *why;
    p.inner.clear();
  }
}

}  // namespace

std::optional<AttachedDeviceProgram> read_program(std::uint32_t id) {
  OwnedFd fd(bpf_prog_get_fd_by_id(id));
  if (!fd.valid()) return std::nullopt;
  auto read = read_info_and_code(fd.get());
  if (!read) return std::nullopt;
  AttachedDeviceProgram p;
  p.id = id;
  p.name = read->first.name;
  p.owner = owner_of(p.name);
  read_program_code(p, fd.get(), read->first, std::move(read->second));
  p.fd = share_fd(fd.release());
  return p;
}

Result<std::vector<AttachedDeviceProgram>> describe_attached(int cgroup_fd, const std::string& dir,
                                                             DeviceProgramCache& cache,
                                                             const std::set<std::uint32_t>* link_ids,
                                                             AttachedIds* ids_out) {
  auto ids = query_ids(cgroup_fd, dir);
  if (!ids) return ids.error();
  cache.seen_attached(dir, ids->ids, Clock::now());
  std::vector<AttachedDeviceProgram> programs;
  programs.reserve(ids->ids.size());
  for (std::uint32_t id : ids->ids) {
    auto p = cache.describe(id);
    if (!p) continue;  // detached and released meanwhile
    p->link = link_ids && link_ids->count(id) != 0;
    programs.push_back(std::move(*p));
  }
  if (ids_out) *ids_out = std::move(*ids);
  return programs;
}

}  // namespace v2_kernel

std::vector<AttachedDeviceProgram> DeviceProgramsSnapshot::all() const {
  std::vector<AttachedDeviceProgram> out;
  for (const auto& cg : cgroups) out.insert(out.end(), cg.programs.begin(), cg.programs.end());
  return out;
}

namespace {

// One cgroup of a look, through its open directory.
Status look_at(const std::shared_ptr<const int>& fd, const std::string& dir, const std::string& subgroup,
               DeviceProgramCache& cache, DeviceProgramsSnapshot& snapshot) {
  // Which are link-attached is only worth a walk of every link on the node when one of
  // them denies a wanted device (a repair finds out then: device_program_repair.cpp).
  v2_kernel::AttachedIds ids;
  auto programs = v2_kernel::describe_attached(*fd, dir, cache, nullptr, &ids);
  if (!programs) return programs.error();
  for (auto& p : *programs) p.subgroup = subgroup;
  snapshot.cgroups.push_back({subgroup, ids.attach_flags, std::move(*programs), fd, ids.revision});
  return {};
}

// crun's sub-cgroup, opened relative to its container's open directory (no second walk of
// the long path); nullptr when there is none.
Result<std::shared_ptr<const int>> open_crun_subgroup(int container_fd, const std::string& container_dir) {
  // A directory's link count is 2 + its subdirectories (cgroupfs keeps it so): with none,
  // there is no sub-cgroup to open. An fstat costs a third of the failed lookup it saves on
  // every look at a container crun did not start (measured here: 0.6 against 1.8 µs).
  // Filesystems that do not count subdirectories report 1: then the lookup decides.
  struct stat st {};
  if (::fstat(container_fd, &st) == 0 && st.st_nlink == 2) return std::shared_ptr<const int>();
  const int fd = ::openat(container_fd, kCrunSubgroup, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
  if (fd >= 0) return share_fd(fd);
  if (errno == ENOENT || errno == ENOTDIR || errno == ELOOP) return std::shared_ptr<const int>();
  return errno_error(errno,
                     "opening cgroup " + container_dir + "/" + kCrunSubgroup + ": " + errno_text(errno));
}

Result<DeviceProgramsSnapshot> look(const std::shared_ptr<const int>& own, const std::string& cgroup_dir,
                                    DeviceProgramCache& cache) {
  DeviceProgramsSnapshot snapshot;
  if (auto s = look_at(own, cgroup_dir, "", cache, snapshot); !s) return s.error();
  auto sub = open_crun_subgroup(*own, cgroup_dir);
  if (!sub) return sub.error();
  if (!*sub) return snapshot;
  auto s = look_at(*sub, cgroup_dir + "/" + kCrunSubgroup, kCrunSubgroup, cache, snapshot);
  // crun's sub-cgroup going away with its container is not an error of the container's.
  if (!s && s.error().code != ENOENT) return s.error();
  return snapshot;
}

}  // namespace

Result<DeviceProgramsSnapshot> snapshot_device_programs(const std::string& cgroup_dir, DeviceProgramCache& cache,
                                                        KeptCgroupDirs* kept) {
  if (!kept) {
    auto own = open_shared_dir(cgroup_dir);
    if (!own) return own.error();
    return look(*own, cgroup_dir, cache);
  }
  for (;;) {
    auto dir = kept->open(cgroup_dir);
    if (!dir) return dir.error();
    auto snapshot = look(dir->fd, cgroup_dir, cache);
    if (snapshot || !dir->kept_before) return snapshot;
    // Refused through a directory kept from before: its cgroup may be gone (or its path
    // re-created). The path tells.
    kept->forget(cgroup_dir);
  }
}

Result<std::optional<DeviceProgramsSnapshot>> snapshot_attached_program(const std::string& cgroup_dir,
                                                                        std::uint32_t prog_id,
                                                                        std::uint32_t attach_flags,
                                                                        DeviceProgramCache& cache, KeptCgroupDirs& kept) {
  auto dir = kept.open(cgroup_dir);
  if (!dir) return dir.error();
  auto program = cache.describe(prog_id);
  if (!program) return std::optional<DeviceProgramsSnapshot>();
  DeviceProgramsSnapshot snapshot;
  const std::uint32_t mode = attach_flags & (BPF_F_ALLOW_MULTI | BPF_F_ALLOW_OVERRIDE);
  snapshot.cgroups.push_back({"", mode, {std::move(*program)}, dir->fd});
  return std::optional(std::move(snapshot));
}

Result<std::uint64_t> device_programs_revision(const std::string& dir) {
  auto fd = v2_kernel::open_cgroup(dir);
  if (!fd) return fd.error();
  cgroup_bpf::Query q;
  // No room for ids: the count and the revision are all this asks (ENOSPC when there are any).
  const int err = cgroup_bpf::query_device_programs(fd->get(), nullptr, 0, q);
  if (err != 0 && err != ENOSPC)
    return errno_error(err, "querying the device programs of " + dir + ": " + errno_text(err));
  return q.revision;
}

Result<std::vector<AttachedDeviceProgram>> query_device_programs(const std::string& cgroup_dir,
                                                                 DeviceProgramCache& cache) {
  auto snapshot = snapshot_device_programs(cgroup_dir, cache);
  if (!snapshot) return snapshot.error();
  return snapshot->all();
}

Result<std::vector<AttachedDeviceProgram>> query_device_programs(const std::string& cgroup_dir) {
  DeviceProgramCache cache;
  auto programs = query_device_programs(cgroup_dir, cache);
  if (!programs) return programs;
  // A one-shot look (`check`) says which are link-attached: it can afford the walk.
  std::map<std::string, std::set<std::uint32_t>> links;
  for (auto& p : *programs) {
    const std::string dir = p.subgroup.empty() ? cgroup_dir : cgroup_dir + "/" + p.subgroup;
    auto found = links.find(dir);
    if (found == links.end()) found = links.emplace(dir, v2_kernel::link_attached_program_ids(dir)).first;
    p.link = found->second.count(p.id) != 0;
  }
  return programs;
}

}  // namespace gdw
