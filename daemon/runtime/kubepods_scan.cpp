#include "runtime/kubepods_scan.h"

#include <fcntl.h>
#include <linux/magic.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/vfs.h>
#include <unistd.h>

#include <algorithm>

#include "runtime/dir_entries.h"

namespace gdw {
namespace {

bool on_kernfs(int fd) {
  struct statfs fs{};
  return ::fstatfs(fd, &fs) == 0 && (fs.f_type == CGROUP_SUPER_MAGIC || fs.f_type == CGROUP2_SUPER_MAGIC);
}

// Closes a descriptor the scanner did not keep.
class Entered {
 public:
  Entered(int fd, bool owned) : fd_(fd), owned_(owned) {}
  Entered(const Entered&) = delete;
  Entered& operator=(const Entered&) = delete;
  ~Entered() {
    if (owned_ && fd_ >= 0) ::close(fd_);
  }
  int get() const { return fd_; }

 private:
  int fd_;
  bool owned_;
};

}  // namespace

std::size_t kept_scan_dirs_budget() {
  constexpr std::size_t kEnough = 4096;
  struct rlimit limit{};
  if (::getrlimit(RLIMIT_NOFILE, &limit) != 0 || limit.rlim_cur == RLIM_INFINITY) return kEnough;
  return std::min<std::size_t>(kEnough, static_cast<std::size_t>(limit.rlim_cur) / 8);
}

void reserve_descriptor_table(std::size_t n) {
  struct rlimit limit{};
  if (::getrlimit(RLIMIT_NOFILE, &limit) == 0 && limit.rlim_cur != RLIM_INFINITY)
    n = std::min<std::size_t>(n, static_cast<std::size_t>(limit.rlim_cur));
  if (n < 2) return;
  const int any = ::open("/", O_PATH | O_CLOEXEC);
  if (any < 0) return;
  // The lowest free number at or above n - 1: the table holds n - 1 from now on.
  const int high = ::fcntl(any, F_DUPFD_CLOEXEC, static_cast<int>(n - 1));
  if (high >= 0) ::close(high);
  ::close(any);
}

KubepodsScanner::KubepodsScanner(std::size_t max_kept) : max_kept_(max_kept) {
  // Room for the directories kept here and the two rule files DevicesV1Files keeps per
  // container (backend/devices_v1_files.h), on a node with as many containers as pods.
  if (max_kept_ > 0) reserve_descriptor_table(std::min<std::size_t>(3 * max_kept_, 16384));
}

int KubepodsScanner::enter(int parent, std::string_view name, ino_t ino, const std::string& path, bool& owned) {
  owned = true;
  if (keep_) {
    if (auto it = kept_.find(ino); it != kept_.end()) {
      it->second.seen = scans_;
      if (::lseek(it->second.fd, 0, SEEK_SET) == 0) {
        owned = false;
        return it->second.fd;
      }
      ::close(it->second.fd);
      kept_.erase(it);
    }
  }
  const int fd = open_subdir(parent, name);
  if (fd < 0 || !keep_ || kept_.size() >= max_kept_) return fd;
  // Replaced between the listing and the open: read it now, but keep only what is known.
  struct stat st{};
  if (::fstat(fd, &st) != 0 || st.st_ino != ino) return fd;
  kept_.emplace(ino, Kept{fd, scans_, path});
  owned = false;
  return fd;
}

void KubepodsScanner::forget(std::string_view dir) {
  std::erase_if(kept_, [&](auto& kv) {
    const std::string& p = kv.second.path;
    if (!p.starts_with(dir) || (p.size() > dir.size() && p[dir.size()] != '/')) return false;
    ::close(kv.second.fd);
    return true;
  });
}

void KubepodsScanner::close_all() {
  for (auto& [ino, k] : kept_) ::close(k.fd);
  kept_.clear();
}

KubepodsTree KubepodsScanner::scan(const KubepodsLocation& where) {
  // Every resync walks the whole tree (it is what catches a missed event): dir_entries.h.
  ++scans_;
  KubepodsTree tree;
  const std::string root = where.dir();
  DirFd root_fd(open_dir(root.c_str()));
  const bool kernfs = root_fd.get() >= 0 && on_kernfs(root_fd.get());
  keep_ = max_kept_ > 0 && kernfs;
  if (!keep_) close_all();
  const ListingEnd end = kernfs ? ListingEnd::kShortRead : ListingEnd::kEmptyRead;
  auto scan_pod = [&](int parent_fd, std::string_view name, ino_t ino, std::string pod_dir, QosClass qos,
                      const PodDirName& pod) {
    // Not added to parent_dirs while it is read: this reference stays valid.
    const std::string& pod_path = tree.parent_dirs.emplace_back(std::move(pod_dir));
    bool owned = false;
    Entered pod_fd(enter(parent_fd, name, ino, pod_path, owned), owned);
    for_each_subdir(pod_fd.get(), [&](std::string_view leaf_name, ino_t) {
      if (auto leaf = parse_container_leaf(leaf_name)) {
        std::string dir;
        dir.reserve(pod_path.size() + 1 + leaf_name.size());
        dir.append(pod_path).append("/").append(leaf_name);
        tree.containers.push_back(DiscoveredContainer{std::move(dir), pod_path, qos, pod, std::move(*leaf)});
      }
    }, end);
  };
  for_each_subdir(root_fd.get(), [&](std::string_view name, ino_t ino) {
    std::string dir;
    dir.reserve(root.size() + 1 + name.size());
    dir.append(root).append("/").append(name);
    if (auto qos = parse_qos_dir(name)) {
      tree.parent_dirs.push_back(dir);
      bool owned = false;
      Entered qos_fd(enter(root_fd.get(), name, ino, dir, owned), owned);
      for_each_subdir(qos_fd.get(), [&](std::string_view pod_name, ino_t pod_ino) {
        if (auto pod = parse_pod_dir(pod_name)) {
          std::string pod_dir;
          pod_dir.reserve(dir.size() + 1 + pod_name.size());
          pod_dir.append(dir).append("/").append(pod_name);
          scan_pod(qos_fd.get(), pod_name, pod_ino, std::move(pod_dir), *qos, *pod);
        }
      }, end);
    } else if (auto pod = parse_pod_dir(name)) {
      scan_pod(root_fd.get(), name, ino, std::move(dir), QosClass::kGuaranteed, *pod);
    }
  }, end);
  // What this scan did not list is gone (or was never kept).
  std::erase_if(kept_, [&](auto& kv) {
    if (kv.second.seen == scans_) return false;
    ::close(kv.second.fd);
    return true;
  });
  return tree;
}

}  // namespace gdw
