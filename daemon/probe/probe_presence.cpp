#include <bpf/bpf.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <set>
#include <string>

#include "probe/probe.h"

namespace gdw {
namespace {

const std::set<std::string> kProbePrograms = {"gdw_sys_exit", "gdw_cap_check", "gdw_cg_mkdir", "gdw_cg_rmdir"};

}  // namespace

Result<ProbePresence> probe_loaded_on_node() {
  ProbePresence presence;
  std::set<__u32> syscall_hook_programs;
  __u32 id = 0;
  for (;;) {
    if (bpf_prog_get_next_id(id, &id) != 0) {
      if (errno == ENOENT) break;
      return Error{std::string("listing BPF programs: ") + std::strerror(errno)};
    }
    int fd = bpf_prog_get_fd_by_id(id);
    if (fd < 0) continue;  // unloaded meanwhile
    bpf_prog_info info{};
    __u32 len = sizeof info;
    if (bpf_obj_get_info_by_fd(fd, &info, &len) == 0 && kProbePrograms.count(info.name)) {
      presence.loaded = true;
      if (std::string(info.name) == "gdw_sys_exit") syscall_hook_programs.insert(info.id);
    }
    ::close(fd);
  }
  if (syscall_hook_programs.empty()) return presence;
  // The hook is attached when a link holds gdw_sys_exit (the program stays loaded when
  // the daemon detaches it).
  id = 0;
  for (;;) {
    if (bpf_link_get_next_id(id, &id) != 0) {
      if (errno == ENOENT) break;
      return Error{std::string("listing BPF links: ") + std::strerror(errno)};
    }
    int fd = bpf_link_get_fd_by_id(id);
    if (fd < 0) continue;
    bpf_link_info info{};
    __u32 len = sizeof info;
    if (bpf_obj_get_info_by_fd(fd, &info, &len) == 0 && syscall_hook_programs.count(info.prog_id))
      presence.syscall_hook_attached = true;
    ::close(fd);
  }
  return presence;
}

}  // namespace gdw
