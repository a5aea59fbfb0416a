// The GPU containers' cgroup directories on cgroup v2, kept open between looks at their
// device programs. A look opened the directory by its path, and checked crun's sub-cgroup
// by its path too: two walks of a path ten components long, the largest share of the
// syscall time before a repair's attach. Kept open, a look needs none: the sub-cgroup is
// opened relative to the kept directory.
//
// A kept descriptor may belong to a cgroup removed since (its container gone, a path
// re-created): the kernel then refuses queries through it (ENOENT, the cgroup is offline).
// The caller forgets it and opens the path again, which tells a gone cgroup (ENOENT) from a
// re-created one. At most `max_kept` directories are kept; others are opened per look.
#pragma once

#include <cstddef>
#include <memory>
#include <string>
#include <unordered_map>

#include "core/result.h"

namespace gdw {

class KeptCgroupDirs {
 public:
  explicit KeptCgroupDirs(std::size_t max_kept) : max_kept_(max_kept) {}

  struct Dir {
    std::shared_ptr<const int> fd;  // closed with the last copy
    bool kept_before = false;       // opened by an earlier look: its cgroup may be gone
  };
  // The directory, kept or opened now; the error names it, its code the errno.
  Result<Dir> open(const std::string& dir);
  // No longer watched, or kept_before and refused: closed once its last copy goes.
  void forget(const std::string& dir) { kept_.erase(dir); }
  std::size_t kept() const { return kept_.size(); }

 private:
  std::size_t max_kept_;
  std::unordered_map<std::string, std::shared_ptr<const int>> kept_;
};

// An open descriptor, shared: closed with the last copy.
std::shared_ptr<const int> share_fd(int fd);
// `dir` opened (v2_kernel::open_cgroup), shared.
Result<std::shared_ptr<const int>> open_shared_dir(const std::string& dir);

}  // namespace gdw
