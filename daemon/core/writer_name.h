// A name a person recognises for the process that wrote a device rule, bounded so it can be
// a metric label: runc, crun, containerd-shim, containerd, cri-o, systemd, kubelet,
// nvidia-container-toolkit, gpu-devwatch, or "other" (the log line then carries the path).
#pragma once

#include <string>

namespace gdw {

struct WriterIdentity {
  std::string comm;         // the writer's comm (15 characters at most)
  std::string parent_comm;  // its parent's comm
  std::string exe;          // readlink /proc/<pid>/exe, empty when gone
  int pid = 0;
};

std::string recognise_writer(const WriterIdentity& w);

}  // namespace gdw
