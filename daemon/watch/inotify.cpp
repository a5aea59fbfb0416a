#include "watch/inotify.h"

#include <unistd.h>

#include <cerrno>
#include <climits>
#include <cstring>

namespace gdw {

Result<Inotify> Inotify::create() {
  int fd = ::inotify_init1(IN_NONBLOCK | IN_CLOEXEC);
  if (fd < 0) return Error{std::string("inotify_init1: ") + std::strerror(errno)};
  return Inotify(fd);
}

Inotify& Inotify::operator=(Inotify&& o) noexcept {
  if (this != &o) {
    if (fd_ >= 0) ::close(fd_);
    fd_ = o.fd_;
    o.fd_ = -1;
  }
  return *this;
}

Inotify::~Inotify() {
  if (fd_ >= 0) ::close(fd_);
}

Result<int> Inotify::add(const std::string& path, std::uint32_t mask) {
  int wd = ::inotify_add_watch(fd_, path.c_str(), mask);
  if (wd < 0) {
    const int err = errno;
    return errno_error(err, "cannot watch " + path + ": " + std::strerror(err));
  }
  return wd;
}

void Inotify::remove(int wd) {
  // EINVAL when the kernel already dropped it (file deleted): nothing to do.
  ::inotify_rm_watch(fd_, wd);
}

Result<std::vector<Inotify::Event>> Inotify::read_queued() {
  std::vector<Event> events;
  alignas(struct inotify_event) char buf[64 * 1024];
  // Room for the largest event: a read that left at least this much free took all that
  // was queued. Reading on to EAGAIN would cost a system call per wake-up (one per
  // revocation in a storm); what arrives meanwhile wakes the loop again (level-triggered).
  constexpr std::size_t kLargestEvent = sizeof(struct inotify_event) + NAME_MAX + 1;
  for (;;) {
    ssize_t n = ::read(fd_, buf, sizeof buf);
    if (n < 0) {
      if (errno == EINTR) continue;
      if (errno == EAGAIN) break;
      return Error{std::string("reading inotify: ") + std::strerror(errno)};
    }
    if (n == 0) break;
    for (char* p = buf; p < buf + n;) {
      auto* ev = reinterpret_cast<struct inotify_event*>(p);
      events.push_back(Event{ev->wd, ev->mask, ev->len ? std::string(ev->name) : std::string()});
      p += sizeof(struct inotify_event) + ev->len;
    }
    if (static_cast<std::size_t>(n) <= sizeof buf - kLargestEvent) break;
  }
  return events;
}

}  // namespace gdw
