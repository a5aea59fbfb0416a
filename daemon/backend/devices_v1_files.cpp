#include "backend/devices_v1_files.h"

#include <fcntl.h>
#include <linux/magic.h>
#include <sys/vfs.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>


namespace gdw {
namespace {

bool on_cgroupfs(int fd) {
  struct statfs fs{};
  return ::fstatfs(fd, &fs) == 0 && fs.f_type == CGROUP_SUPER_MAGIC;
}

// Reads the whole file from offset 0; -errno on failure. A seq_file read returns whole
// records, at least a page of them when there is that much (devices.list is one record,
// all of it while it fits the buffer): a read that leaves more than a line's room below a
// page was the end, and the read that would return 0 is saved (half the syscalls of an
// observation). A plain file's short read is its end too.
int read_all_at_zero(int fd, std::string& text) {
  constexpr std::size_t kLongestLine = 64;  // "c 4294967295:4294967295 rwm"
  constexpr std::size_t kSmallestSeqBuffer = 4096;  // PAGE_SIZE, or more
  char buf[16384];
  off_t off = 0;
  for (;;) {
    ssize_t n = ::pread(fd, buf, sizeof buf, off);
    if (n > 0) {
      text.append(buf, static_cast<std::size_t>(n));
      off += n;
      if (static_cast<std::size_t>(n) + kLongestLine < kSmallestSeqBuffer) return 0;
      continue;
    }
    if (n < 0 && errno == EINTR) continue;
    return n < 0 ? -errno : 0;
  }
}

// One rule per write(), as the kernel requires; 0 or the errno of the first failing rule's.
int write_rule(int fd, const DeviceRule& rule) {
  const std::string text = format_device_rule(rule);
  ssize_t n;
  do {
    n = ::write(fd, text.data(), text.size());
  } while (n < 0 && errno == EINTR);
  return n < 0 ? errno : 0;
}

// What a refused grant's errno means here.
std::string describe_grant_error(int err) {
  if (err == EPERM) return "refused by the kernel (a parent cgroup denies this device)";
  if (err == ENOENT || err == ENODEV) return "cgroup removed";
  return std::strerror(err);
}

Error list_error(int err) {
  return errno_error(err, "cannot read devices.list: " + std::string(std::strerror(err)));
}

}  // namespace

DevicesV1Files::~DevicesV1Files() {
  for (auto& [dir, f] : files_) {
    if (f.list >= 0) ::close(f.list);
    if (f.allow >= 0) ::close(f.allow);
  }
}

DevicesV1Files::Kept* DevicesV1Files::kept(const std::string& cgroup_dir) {
  if (last_ && last_->first == cgroup_dir) return last_;
  auto it = files_.find(cgroup_dir);
  if (it == files_.end()) return nullptr;
  last_ = &*it;
  return last_;
}

DevicesV1Files::Handle DevicesV1Files::open_file(const std::string& cgroup_dir, bool list) {
  Kept* k = kept(cgroup_dir);
  if (k) {
    int fd = list ? k->second.list : k->second.allow;
    if (fd >= 0) return {fd, false, true};
  }
  const std::string path = cgroup_dir + (list ? "/devices.list" : "/devices.allow");
  int fd = ::open(path.c_str(), (list ? O_RDONLY : O_WRONLY) | O_CLOEXEC);
  if (fd < 0 || !on_cgroupfs(fd)) return {fd, true, false};
  if (!k) {
    if (files_.size() >= max_cgroups_) return {fd, true, false};
    k = &*files_.emplace(cgroup_dir, Files{}).first;
  }
  (list ? k->second.list : k->second.allow) = fd;
  return {fd, false, false};
}

void DevicesV1Files::open_allow_ahead(const std::string& cgroup_dir) {
  Handle allow = open_file(cgroup_dir, /*list=*/false);
  if (allow.owned && allow.fd >= 0) ::close(allow.fd);  // (not kept: the grant opens it then)
}

void DevicesV1Files::drop(const std::string& cgroup_dir, bool list) {
  Kept* k = kept(cgroup_dir);
  if (!k) return;
  int& fd = list ? k->second.list : k->second.allow;
  if (fd >= 0) ::close(fd);
  fd = -1;
  if (k->second.list >= 0 || k->second.allow >= 0) return;
  last_ = nullptr;
  files_.erase(cgroup_dir);
}

Result<std::string> DevicesV1Files::read_list(const std::string& cgroup_dir) {
  for (;;) {
    Handle h = open_file(cgroup_dir, /*list=*/true);
    if (h.fd < 0) return list_error(errno);
    std::string text;
    const int err = -read_all_at_zero(h.fd, text);
    if (h.owned) ::close(h.fd);
    if (!err) {
      if (!h.owned && !h.kept_before) open_allow_ahead(cgroup_dir);
      return text;
    }
    if (!h.owned) drop(cgroup_dir, /*list=*/true);
    // A descriptor kept from before fails once its cgroup is removed: open the path again
    // (a re-created cgroup is read afresh, a gone one says ENOENT).
    if (!h.kept_before) return list_error(err);
  }
}

std::vector<Status> DevicesV1Files::write_grants(const std::string& cgroup_dir, const std::vector<DeviceRule>& rules) {
  std::vector<Status> outcomes;
  outcomes.reserve(rules.size());
  for (bool retried = false; !rules.empty();) {
    outcomes.clear();
    Handle h = open_file(cgroup_dir, /*list=*/false);
    const int open_err = h.fd < 0 ? errno : 0;
    bool stale = false;
    for (const auto& rule : rules) {
      const int err = h.fd >= 0 ? write_rule(h.fd, rule) : open_err;
      // ENODEV on a descriptor kept from before: its cgroup is gone; try the path once.
      stale = err == ENODEV && h.kept_before && !retried;
      if (stale) break;
      outcomes.push_back(err ? Status(errno_error(err, describe_grant_error(err))) : Status());
    }
    if (h.owned && h.fd >= 0) ::close(h.fd);
    if (!h.owned && (stale || outcomes.empty() || !outcomes.back().ok())) drop(cgroup_dir, /*list=*/false);
    if (!stale) break;
    retried = true;
  }
  return outcomes;
}

void DevicesV1Files::forget(const std::string& cgroup_dir) {
  drop(cgroup_dir, true);
  drop(cgroup_dir, false);
}

std::size_t DevicesV1Files::open_files() const {
  std::size_t n = 0;
  for (const auto& [dir, f] : files_) n += (f.list >= 0) + (f.allow >= 0);
  return n;
}

}  // namespace gdw
