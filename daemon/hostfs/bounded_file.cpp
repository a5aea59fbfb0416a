#include "hostfs/bounded_file.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

namespace gdw {
namespace {

// Closes the descriptor on every path out.
struct Fd {
  int fd;
  ~Fd() {
    if (fd >= 0) ::close(fd);
  }
};

Error errno_at(const std::string& path, int err) { return errno_error(err, path + ": " + std::strerror(err)); }

}  // namespace

Result<std::string> read_bounded_file(const std::string& path, const FileLimits& limits) {
  Fd f{::open(path.c_str(), O_RDONLY | O_CLOEXEC | (limits.nonblocking ? O_NONBLOCK : 0))};
  if (f.fd < 0) return errno_at(path, errno);
  if (limits.regular_only) {
    struct stat st{};
    if (::fstat(f.fd, &st) != 0) return errno_at(path, errno);
    if (!S_ISREG(st.st_mode)) return Error{path + ": not a regular file"};
  }
  std::string text;
  char buf[65536];
  for (;;) {
    const ssize_t n = ::read(f.fd, buf, sizeof buf);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return errno_at(path, errno);
    if (n == 0) return text;
    text.append(buf, static_cast<std::size_t>(n));
    if (text.size() > limits.max_bytes)
      return Error{path + ": larger than " + std::to_string(limits.max_bytes) + " bytes"};
  }
}

}  // namespace gdw
