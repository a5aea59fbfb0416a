// Directory listing for the walks every resync repeats (the kubepods tree, the runtimes'
// state directories): each level opened relative to its parent's descriptor and read with
// getdents64 into a buffer on the stack — one short path lookup per directory, no DIR
// allocation, no fstat, no getdents64 call just to learn the end (runtime/kubepods_scan.h
// keeps the kubepods tree's directories open instead).
#pragma once

#include <dirent.h>
#include <fcntl.h>
#include <sys/types.h>
#include <unistd.h>

#include <cstddef>
#include <string_view>
#include <type_traits>

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

// Calls f(name, d_type) — or f(name, d_type, d_ino) — for each entry of the open directory
// `fd` but "." and "..". `name` lives until f returns and is NUL-terminated (name.data()
// may be passed to *at calls).
// How a listing's end is known. kEmptyRead: getdents64 returns 0, as every filesystem
// does. kShortRead: a read that left room for any record was the last: kernfs (cgroupfs)
// fills the buffer until the next record does not fit, so the call that would return 0
// is saved (a third of a pod directory's syscalls); not every filesystem promises that.
enum class ListingEnd { kEmptyRead, kShortRead };

template <typename F>
void for_each_dir_entry(int fd, F&& f, ListingEnd end = ListingEnd::kEmptyRead) {
  if (fd < 0) return;
  // The largest record getdents64 writes: its header and a 255-byte name, NUL, aligned.
  constexpr std::size_t kLargestRecord = (offsetof(dirent64, d_name) + 256 + 7) & ~std::size_t{7};
  alignas(dirent64) char buf[8192];
  for (;;) {
    const ssize_t n = ::getdents64(fd, buf, sizeof buf);
    if (n <= 0) return;
    for (ssize_t off = 0; off < n;) {
      const auto* e = reinterpret_cast<const dirent64*>(buf + off);
      off += e->d_reclen;
      const std::string_view name(e->d_name);
      if (name == "." || name == "..") continue;
      if constexpr (std::is_invocable_v<F, std::string_view, unsigned char, ino_t>) {
        f(name, e->d_type, static_cast<ino_t>(e->d_ino));
      } else {
        f(name, e->d_type);
      }
    }
    if (end == ListingEnd::kShortRead && static_cast<std::size_t>(n) + kLargestRecord <= sizeof buf) return;
  }
}

// Subdirectories only, as d_type says (cgroupfs and the runtimes' tmpfs always fill it):
// f(name) or f(name, d_ino).
template <typename F>
void for_each_subdir(int fd, F&& f, ListingEnd end = ListingEnd::kEmptyRead) {
  for_each_dir_entry(fd, [&](std::string_view name, unsigned char type, ino_t ino) {
    if (type != DT_DIR) return;
    if constexpr (std::is_invocable_v<F, std::string_view, ino_t>) {
      f(name, ino);
    } else {
      f(name);
    }
  }, end);
}

}  // namespace gdw
