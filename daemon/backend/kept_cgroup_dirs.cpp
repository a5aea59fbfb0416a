#include "backend/kept_cgroup_dirs.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>

namespace gdw {

Result<std::shared_ptr<const int>> open_shared_dir(const std::string& dir) {
  const int fd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) return errno_error(errno, "opening cgroup " + dir + ": " + errno_text(errno));
  return std::shared_ptr<const int>(new int(fd), [](const int* f) {
    ::close(*f);
    delete f;
  });
}

Result<KeptCgroupDirs::Dir> KeptCgroupDirs::open(const std::string& dir) {
  if (auto it = kept_.find(dir); it != kept_.end()) return Dir{it->second, true};
  auto fd = open_shared_dir(dir);
  if (!fd) return fd.error();
  if (kept_.size() < max_kept_) kept_.emplace(dir, *fd);
  return Dir{std::move(*fd), false};
}

}  // namespace gdw
