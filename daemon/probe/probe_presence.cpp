#include <bpf/bpf.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <string>

#include "probe/probe.h"

namespace gdw {

Result<bool> probe_loaded_on_node() {
  __u32 id = 0;
  for (;;) {
    if (bpf_prog_get_next_id(id, &id) != 0) {
      if (errno == ENOENT) return false;
      return Error{std::string("listing BPF programs: ") + std::strerror(errno)};
    }
    int fd = bpf_prog_get_fd_by_id(id);
    if (fd < 0) continue;  // unloaded meanwhile
    bpf_prog_info info{};
    __u32 len = sizeof info;
    bool ours = bpf_obj_get_info_by_fd(fd, &info, &len) == 0 && std::string(info.name) == "gdw_sys_exit";
    ::close(fd);
    if (ours) return true;
  }
}

}  // namespace gdw
