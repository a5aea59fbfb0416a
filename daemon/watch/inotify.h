// inotify: one non-blocking descriptor for every watch the daemon holds.
#pragma once

#include <sys/inotify.h>

#include <cstdint>
#include <string>
#include <vector>

#include "core/result.h"

namespace gdw {

class Inotify {
 public:
  static Result<Inotify> create();
  Inotify(Inotify&& o) noexcept : fd_(o.fd_) { o.fd_ = -1; }
  Inotify& operator=(Inotify&& o) noexcept;
  Inotify(const Inotify&) = delete;
  Inotify& operator=(const Inotify&) = delete;
  ~Inotify();

  int fd() const { return fd_; }
  // The watch descriptor. Errors carry errno as their code (ENOENT: the path is gone).
  Result<int> add(const std::string& path, std::uint32_t mask);
  void remove(int wd);

  struct Event {
    int wd = -1;
    std::uint32_t mask = 0;
    std::string name;
  };
  // What is queued now (non-blocking), in as few reads as it takes: events that arrive
  // during the last read may be left for the next wake-up. IN_Q_OVERFLOW arrives as an
  // event with wd -1.
  Result<std::vector<Event>> read_queued();

 private:
  explicit Inotify(int fd) : fd_(fd) {}
  int fd_ = -1;
};

}  // namespace gdw
