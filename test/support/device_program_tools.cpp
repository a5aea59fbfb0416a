#include "support/device_program_tools.h"

#include <bpf/bpf.h>
#include <fcntl.h>
#include <sched.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <ctime>
#include <filesystem>

#include "support/foreign_device_program.h"

namespace gdw::test {
namespace {

// A file descriptor closed at the end of its scope.
struct Fd {
  int fd = -1;
  explicit Fd(int f) : fd(f) {}
  ~Fd() {
    if (fd >= 0) ::close(fd);
  }
  Fd(const Fd&) = delete;
  Fd& operator=(const Fd&) = delete;
};

int open_cgroup(const std::string& dir) { return ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC); }

std::vector<std::uint32_t> query_ids(int cgroup_fd, int* err) {
  std::uint32_t ids[64];  // BPF_CGROUP_MAX_PROGS
  std::uint32_t count = 64, flags = 0;
  if (bpf_prog_query(cgroup_fd, BPF_CGROUP_DEVICE, 0, &flags, ids, &count) != 0) {
    if (err != nullptr) *err = errno;
    return {};
  }
  return {ids, ids + count};
}

// The program's translated instructions; empty when they cannot be read.
std::vector<bpf_insn> xlated_code(int prog_fd) {
  bpf_prog_info info{};
  std::uint32_t len = sizeof info;
  if (bpf_obj_get_info_by_fd(prog_fd, &info, &len) != 0 || info.xlated_prog_len == 0) return {};
  std::vector<bpf_insn> code(info.xlated_prog_len / sizeof(bpf_insn));
  const std::uint32_t xlated_len = info.xlated_prog_len;
  info = bpf_prog_info{};
  info.xlated_prog_len = xlated_len;
  info.xlated_prog_insns = reinterpret_cast<std::uintptr_t>(code.data());
  len = sizeof info;
  if (bpf_obj_get_info_by_fd(prog_fd, &info, &len) != 0) return {};
  return code;
}

int attach_fd(int prog_fd, const std::string& cgroup_dir, unsigned flags, int replace_fd = -1) {
  Fd cg(open_cgroup(cgroup_dir));
  if (cg.fd < 0) return errno;
  struct bpf_prog_attach_opts opts{};
  opts.sz = sizeof opts;
  opts.flags = flags;
  opts.replace_prog_fd = (flags & BPF_F_REPLACE) != 0 ? replace_fd : 0;
  return bpf_prog_attach_opts(prog_fd, cg.fd, BPF_CGROUP_DEVICE, &opts) == 0 ? 0 : errno;
}

int wait_child(pid_t pid) {
  int status = 0;
  if (::waitpid(pid, &status, 0) != pid || !WIFEXITED(status)) return -1;
  return WEXITSTATUS(status) == 255 ? -1 : WEXITSTATUS(status);
}

}  // namespace

std::vector<AttachedProgramInfo> attached_device_programs(const std::string& cgroup_dir, int* err) {
  if (err != nullptr) *err = 0;
  Fd cg(open_cgroup(cgroup_dir));
  if (cg.fd < 0) {
    if (err != nullptr) *err = errno;
    return {};
  }
  std::vector<AttachedProgramInfo> programs;
  for (std::uint32_t id : query_ids(cg.fd, err)) {
    AttachedProgramInfo p{id, ""};
    Fd prog(bpf_prog_get_fd_by_id(id));
    bpf_prog_info info{};
    std::uint32_t len = sizeof info;
    if (prog.fd >= 0 && bpf_obj_get_info_by_fd(prog.fd, &info, &len) == 0) p.name = info.name;
    programs.push_back(p);
  }
  return programs;
}

std::string describe(const std::vector<AttachedProgramInfo>& programs) {
  std::string text = "[";
  for (const auto& p : programs)
    text += (text.size() > 1 ? ", " : "") + std::to_string(p.id) + " " + (p.name.empty() ? "-" : p.name);
  return text + "]";
}

int detach_device_program(const std::string& cgroup_dir, std::uint32_t id) {
  Fd prog(bpf_prog_get_fd_by_id(id));
  if (prog.fd < 0) return errno;
  Fd cg(open_cgroup(cgroup_dir));
  if (cg.fd < 0) return errno;
  return bpf_prog_detach2(prog.fd, cg.fd, BPF_CGROUP_DEVICE) == 0 ? 0 : errno;
}

int runc_style_reapply(const std::string& cgroup_dir, const std::vector<OciDeviceCgroupRule>& rules) {
  ForeignProgram program("", rules);
  if (program.fd < 0) return program.load_errno;
  int err = 0;
  const auto old = attached_device_programs(cgroup_dir, &err);
  if (err != 0) return err;
  if (old.size() == 1) {
    Fd replaced(bpf_prog_get_fd_by_id(old[0].id));
    if (replaced.fd >= 0 &&
        attach_fd(program.fd, cgroup_dir, BPF_F_ALLOW_MULTI | BPF_F_REPLACE, replaced.fd) == 0)
      return 0;
    // Replaced or detached by someone else meanwhile: as when several were attached.
  }
  if (int attach_err = attach_fd(program.fd, cgroup_dir, BPF_F_ALLOW_MULTI); attach_err != 0) return attach_err;
  for (const auto& p : old) detach_device_program(cgroup_dir, p.id);
  return 0;
}

int SystemdStyleReapplier::reapply(const std::string& cgroup_dir, const std::vector<OciDeviceCgroupRule>& rules) {
  ForeignProgram program("sd_devices", rules);
  if (program.fd < 0) return program.load_errno;
  if (int err = program.attach(cgroup_dir); err != 0) return err;
  auto previous = last_.find(cgroup_dir);
  if (previous != last_.end()) detach_device_program(cgroup_dir, previous->second);
  last_[cgroup_dir] = program.id;
  return 0;
}

int nvidia_style_grant(const std::string& cgroup_dir, const std::vector<DeviceRule>& allowed) {
  int err = 0;
  const auto programs = attached_device_programs(cgroup_dir, &err);
  if (err != 0) return err;
  const auto prefix = assemble_allow_prefix(allowed);
  for (const auto& p : programs) {
    Fd old(bpf_prog_get_fd_by_id(p.id));
    if (old.fd < 0) return errno;
    auto code = xlated_code(old.fd);
    if (code.empty()) return EIO;
    code.insert(code.begin(), prefix.begin(), prefix.end());
    ForeignProgram copy("", code);
    if (copy.fd < 0) return copy.load_errno;
    if (int attach_err = copy.attach(cgroup_dir); attach_err != 0) return attach_err;
    Fd cg(open_cgroup(cgroup_dir));
    if (cg.fd < 0 || bpf_prog_detach2(old.fd, cg.fd, BPF_CGROUP_DEVICE) != 0) return errno;
  }
  return 0;
}

std::set<std::uint32_t> loaded_program_ids(bpf_prog_type type, const std::string& name) {
  std::set<std::uint32_t> ids;
  std::uint32_t id = 0;
  while (bpf_prog_get_next_id(id, &id) == 0) {
    Fd prog(bpf_prog_get_fd_by_id(id));
    if (prog.fd < 0) continue;  // unloaded meanwhile
    bpf_prog_info info{};
    std::uint32_t len = sizeof info;
    if (bpf_obj_get_info_by_fd(prog.fd, &info, &len) == 0 && info.type == static_cast<std::uint32_t>(type) &&
        (name.empty() || name == info.name))
      ids.insert(id);
  }
  return ids;
}

std::set<std::uint32_t> attached_program_ids_below(const std::string& cgroup2_root) {
  namespace fs = std::filesystem;
  std::set<std::uint32_t> ids;
  auto add = [&](const std::string& dir) {
    int err = 0;
    for (const auto& p : attached_device_programs(dir, &err)) ids.insert(p.id);
  };
  add(cgroup2_root);
  std::error_code ec;
  // Cgroups of other runs come and go meanwhile: errors skip them.
  for (auto it = fs::recursive_directory_iterator(cgroup2_root, fs::directory_options::skip_permission_denied, ec);
       !ec && it != fs::recursive_directory_iterator(); it.increment(ec)) {
    if (it->is_directory(ec) && !it->is_symlink(ec)) add(it->path().string());
  }
  return ids;
}

int attach_as(const char* comm, const std::string& cgroup_dir, const std::vector<OciDeviceCgroupRule>& rules,
              AttachAs how) {
  // Everything the child needs is made here: between fork and _exit only system calls.
  const auto insns = assemble_device_filter(rules);
  const std::string procs = cgroup_dir + "/cgroup.procs";
  const auto pause_s = std::chrono::duration_cast<std::chrono::seconds>(how.after_load);
  const struct timespec pause{pause_s.count(), std::chrono::nanoseconds(how.after_load - pause_s).count()};
  static const char kLicense[] = "GPL";
  union bpf_attr load{};
  load.prog_type = BPF_PROG_TYPE_CGROUP_DEVICE;
  load.insn_cnt = static_cast<std::uint32_t>(insns.size());
  load.insns = reinterpret_cast<std::uintptr_t>(insns.data());
  load.license = reinterpret_cast<std::uintptr_t>(kLicense);
  const union bpf_attr other_load = load;  // another address: not one attr loaded again
  const std::string dir = cgroup_dir;
  cpu_set_t one_cpu;
  CPU_ZERO(&one_cpu);
  if (how.cpu >= 0) CPU_SET(how.cpu, &one_cpu);
  const pid_t pid = ::fork();
  if (pid < 0) return -1;
  if (pid == 0) {
    ::prctl(PR_SET_NAME, comm);
    if (how.cpu >= 0 && ::sched_setaffinity(0, sizeof one_cpu, &one_cpu) != 0) _exit(errno & 0xff);
    if (how.from_inside) {
      const int fd = ::open(procs.c_str(), O_WRONLY | O_CLOEXEC);
      if (fd < 0 || ::write(fd, "0", 1) != 1) _exit(errno & 0xff);
    }
    for (int i = 0; i < how.extra_loads; ++i) {
      const union bpf_attr* attr = i % 2 ? &other_load : &load;
      const int extra = static_cast<int>(::syscall(SYS_bpf, BPF_PROG_LOAD, attr, sizeof *attr));
      if (extra < 0) _exit(errno & 0xff);
      ::close(extra);
    }
    const int prog = static_cast<int>(::syscall(SYS_bpf, BPF_PROG_LOAD, &load, sizeof load));
    if (prog < 0) _exit(errno & 0xff);
    if (how.after_load.count() > 0) ::nanosleep(&pause, nullptr);
    if (!how.then_attach) _exit(0);
    const int cg = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (cg < 0) _exit(errno & 0xff);
    union bpf_attr attach{};
    attach.target_fd = static_cast<std::uint32_t>(cg);
    attach.attach_bpf_fd = static_cast<std::uint32_t>(prog);
    attach.attach_type = BPF_CGROUP_DEVICE;
    attach.attach_flags = BPF_F_ALLOW_MULTI;
    _exit(::syscall(SYS_bpf, BPF_PROG_ATTACH, &attach, sizeof attach) == 0 ? 0 : (errno & 0xff));
  }
  return wait_child(pid);
}

int deny_as(const char* comm, const std::string& cgroup_dir, const std::string& rule) {
  const std::string path = cgroup_dir + "/devices.deny";
  const pid_t pid = ::fork();
  if (pid < 0) return -1;
  if (pid == 0) {
    ::prctl(PR_SET_NAME, comm);
    const int fd = ::open(path.c_str(), O_WRONLY | O_CLOEXEC);
    if (fd < 0) _exit(errno & 0xff);
    _exit(::write(fd, rule.data(), rule.size()) == static_cast<ssize_t>(rule.size()) ? 0 : (errno & 0xff));
  }
  return wait_child(pid);
}

}  // namespace gdw::test
