// Directory listing for the walks every resync repeats (the kubepods tree, the runtimes'
// state directories): each level opened relative to its parent's descriptor and read with
// getdents64 into a buffer on the stack — one short path lookup per directory, no DIR
// allocation, no fstat.
#pragma once

#include <dirent.h>
#include <fcntl.h>
#include <unistd.h>

#include <string_view>

namespace gdw {

// An owned descriptor (-1: none; the listing functions then list nothing).
class DirFd {
 public:
  explicit DirFd(int fd) : fd_(fd) {}
  DirFd(const DirFd&) = delete;
  DirFd& operator=(const DirFd&) = delete;
  ~DirFd() {
    if (fd_ >= 0) ::close(fd_);
  }
  int get() const { return fd_; }

 private:
  int fd_;
};

inline int open_dir(const char* path) { return ::open(path, O_RDONLY | O_DIRECTORY | O_CLOEXEC); }

// `name`, an entry that for_each_dir_entry passed (NUL-terminated there), of the open
// directory `parent`; a symlink put in its place since the listing is not followed.
inline int open_subdir(int parent, std::string_view name) {
  if (parent < 0) return -1;
  return ::openat(parent, name.data(), O_RDONLY | O_DIRECTORY | O_CLOEXEC | O_NOFOLLOW);
}

// Calls f(name, d_type) for each entry of the open directory `fd` but "." and "..". `name`
// lives until f returns and is NUL-terminated (name.data() may be passed to *at calls).
template <typename F>
void for_each_dir_entry(int fd, F&& f) {
  if (fd < 0) return;
  alignas(dirent64) char buf[8192];
  for (;;) {
    const ssize_t n = ::getdents64(fd, buf, sizeof buf);
    if (n <= 0) return;
    for (ssize_t off = 0; off < n;) {
      const auto* e = reinterpret_cast<const dirent64*>(buf + off);
      off += e->d_reclen;
      const std::string_view name(e->d_name);
      if (name != "." && name != "..") f(name, e->d_type);
    }
  }
}

// Subdirectories only, as d_type says (cgroupfs and the runtimes' tmpfs always fill it).
template <typename F>
void for_each_subdir(int fd, F&& f) {
  for_each_dir_entry(fd, [&](std::string_view name, unsigned char type) {
    if (type == DT_DIR) f(name);
  });
}

}  // namespace gdw
