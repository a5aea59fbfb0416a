#include "backend/kept_cgroup_dirs.h"

#include <unistd.h>

#include "backend/device_programs_v2_kernel.h"

namespace gdw {

std::shared_ptr<const int> share_fd(int fd) {
  return std::shared_ptr<const int>(new int(fd), [](const int* f) {
    ::close(*f);
    delete f;
  });
}

Result<std::shared_ptr<const int>> open_shared_dir(const std::string& dir) {
  auto fd = v2_kernel::open_cgroup(dir);
  if (!fd) return fd.error();
  return share_fd(fd->release());
}

Result<KeptCgroupDirs::Dir> KeptCgroupDirs::open(const std::string& dir) {
  if (auto it = kept_.find(dir); it != kept_.end()) return Dir{it->second, true};
  auto fd = open_shared_dir(dir);
  if (!fd) return fd.error();
  if (kept_.size() < max_kept_) kept_.emplace(dir, *fd);
  return Dir{std::move(*fd), false};
}

}  // namespace gdw
