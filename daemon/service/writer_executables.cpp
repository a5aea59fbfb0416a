#include "service/writer_executables.h"

#include <unistd.h>

namespace gdw {

std::string WriterExecutables::of(const ProcessInfo& p, const std::string& proc_root) {
  // Without a start time (an older record) the pid alone is not an identity: read it.
  if (p.start_time_ns != 0) {
    for (const auto& e : entries_)
      if (e.pid == p.pid && e.start_time_ns == p.start_time_ns) return e.exe;
  }
  char exe[4096];
  ssize_t len = ::readlink((proc_root + "/" + std::to_string(p.pid) + "/exe").c_str(), exe, sizeof exe - 1);
  if (len <= 0) return {};
  std::string path(exe, static_cast<std::size_t>(len));
  if (p.start_time_ns == 0 || capacity_ == 0) return path;
  if (entries_.size() >= capacity_) entries_.pop_front();
  entries_.push_back({p.pid, p.start_time_ns, path});
  return path;
}

}  // namespace gdw
