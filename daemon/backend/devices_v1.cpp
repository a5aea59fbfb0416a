#include "backend/devices_v1.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

namespace gdw {

Result<std::string> read_devices_list(const std::string& cgroup_dir) {
  const std::string path = cgroup_dir + "/devices.list";
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    const int err = errno;
    return errno_error(err, "cannot read devices.list: " + std::string(std::strerror(err)));
  }
  std::string text;
  char buf[8192];
  int err = 0;
  for (;;) {
    ssize_t n = ::read(fd, buf, sizeof buf);
    if (n > 0) {
      text.append(buf, static_cast<std::size_t>(n));
      continue;
    }
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) err = errno;
    break;
  }
  ::close(fd);
  if (err) return errno_error(err, "cannot read devices.list: " + std::string(std::strerror(err)));
  return text;
}

std::string describe_grant_error(int err) {
  if (err == 0) return "granted";
  if (err == EPERM) return "refused by the kernel (a parent cgroup denies this device)";
  if (err == ENOENT || err == ENODEV) return "cgroup removed";
  return std::strerror(err);
}

std::vector<Status> write_device_grants(const std::string& cgroup_dir, const std::vector<DeviceRule>& rules) {
  std::vector<Status> outcomes;
  if (rules.empty()) return outcomes;
  outcomes.reserve(rules.size());
  int fd = ::open((cgroup_dir + "/devices.allow").c_str(), O_WRONLY | O_CLOEXEC);
  const int open_err = fd < 0 ? errno : 0;
  for (const auto& rule : rules) {
    int err = open_err;
    if (fd >= 0) {
      const std::string text = format_device_rule(rule);
      ssize_t n;
      do {
        n = ::write(fd, text.data(), text.size());
      } while (n < 0 && errno == EINTR);
      if (n < 0) err = errno;
    }
    outcomes.push_back(err ? Status(errno_error(err, describe_grant_error(err))) : Status());
  }
  if (fd >= 0) ::close(fd);
  return outcomes;
}

}  // namespace gdw
