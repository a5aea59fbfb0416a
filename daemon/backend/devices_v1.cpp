#include "backend/devices_v1.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>

namespace gdw {

bool is_cgroup_gone(int err) { return err == ENOENT || err == ENODEV; }

DevicesListText read_devices_list(const std::string& cgroup_dir) {
  DevicesListText out;
  int fd = ::open((cgroup_dir + "/devices.list").c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    out.err = errno;
    return out;
  }
  char buf[8192];
  for (;;) {
    ssize_t n = ::read(fd, buf, sizeof buf);
    if (n > 0) {
      out.text.append(buf, static_cast<std::size_t>(n));
      continue;
    }
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) out.err = errno;
    break;
  }
  ::close(fd);
  return out;
}

std::vector<GrantOutcome> write_device_grants(const std::string& cgroup_dir, const std::vector<DeviceRule>& rules) {
  std::vector<GrantOutcome> outcomes;
  if (rules.empty()) return outcomes;
  outcomes.reserve(rules.size());
  int fd = ::open((cgroup_dir + "/devices.allow").c_str(), O_WRONLY | O_CLOEXEC);
  int open_err = fd < 0 ? errno : 0;
  for (const auto& rule : rules) {
    GrantOutcome o{rule, open_err};
    if (fd >= 0) {
      const std::string text = format_device_rule(rule);
      ssize_t n;
      do {
        n = ::write(fd, text.data(), text.size());
      } while (n < 0 && errno == EINTR);
      if (n < 0) o.err = errno;
    }
    outcomes.push_back(o);
  }
  if (fd >= 0) ::close(fd);
  return outcomes;
}

}  // namespace gdw
