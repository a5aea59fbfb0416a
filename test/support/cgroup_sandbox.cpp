#include "support/cgroup_sandbox.h"

#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <stdexcept>

namespace gdw::test {
namespace fs = std::filesystem;

int write_kernel_file(const std::string& path, const std::string& content) {
  int fd = ::open(path.c_str(), O_WRONLY | O_CLOEXEC);
  if (fd < 0) return errno;
  ssize_t n = ::write(fd, content.data(), content.size());
  int err = n < 0 ? errno : 0;
  ::close(fd);
  return err;
}

int move_to_cgroup(const std::string& dir, pid_t pid) {
  return write_kernel_file(dir + "/cgroup.procs", std::to_string(pid));
}

EveryHierarchyCleanup::~EveryHierarchyCleanup() {
  if (name.empty()) return;
  for (const char* ctrl : {"blkio", "cpu", "cpuacct", "cpuset", "devices", "freezer", "memory", "pids", "systemd",
                           "hugetlb", "net_cls", "net_prio", "perf_event", "rdma", "misc", "unified"})
    remove_cgroup_tree(std::string("/sys/fs/cgroup/") + ctrl + "/" + name);
}

void remove_cgroup_tree(const std::string& dir) {
  std::error_code ec;
  if (!fs::exists(dir, ec)) return;
  std::vector<std::string> dirs;
  for (auto it = fs::recursive_directory_iterator(dir, ec); !ec && it != fs::recursive_directory_iterator();
       it.increment(ec)) {
    if (it->is_directory(ec) && !it->is_symlink(ec)) dirs.push_back(it->path());
  }
  std::sort(dirs.begin(), dirs.end(), [](const std::string& a, const std::string& b) { return a.size() > b.size(); });
  dirs.push_back(dir);
  for (const auto& d : dirs) {
    // A killed process leaves its cgroup a moment after waitpid; retry briefly.
    for (int i = 0; i < 200 && ::rmdir(d.c_str()) != 0 && errno == EBUSY; ++i) {
      struct timespec ts{0, 5'000'000};
      nanosleep(&ts, nullptr);
    }
  }
}

std::string hierarchy_dir(const std::string& hierarchy, const std::string& cgroup_root) {
  const std::string dir = cgroup_root + "/" + hierarchy;
  if (hierarchy == "unified" && ::access((dir + "/cgroup.controllers").c_str(), F_OK) != 0 &&
      ::access((cgroup_root + "/cgroup.controllers").c_str(), F_OK) == 0)
    return cgroup_root;  // pure cgroup v2
  return dir;
}

bool CgroupSandbox::available(const std::string& hierarchy, const std::string& cgroup_root) {
  if (::geteuid() != 0) return false;
  std::string dir = hierarchy_dir(hierarchy, cgroup_root);
  return ::access((dir + "/cgroup.procs").c_str(), W_OK) == 0;
}

CgroupSandbox::CgroupSandbox(const std::string& hierarchy, const std::string& tag, const std::string& cgroup_root)
    : hierarchy_root_(hierarchy_dir(hierarchy, cgroup_root)) {
  static std::atomic<int> counter{0};
  name_ = "gdw-test-" + std::to_string(::getpid()) + "-" + std::to_string(counter++);
  if (!tag.empty()) name_ += "-" + tag;
  if (::mkdir(path().c_str(), 0755) != 0)
    throw std::runtime_error("cannot create test cgroup " + path() + ": " + std::strerror(errno));
}

CgroupSandbox::~CgroupSandbox() {
  for (pid_t pid : sleepers_) {
    ::kill(pid, SIGKILL);
    ::waitpid(pid, nullptr, 0);
  }
  remove_cgroup_tree(path());
}

std::string CgroupSandbox::path(const std::string& rel) const {
  return rel.empty() ? hierarchy_root_ + "/" + name_ : hierarchy_root_ + "/" + name_ + "/" + rel;
}

std::string CgroupSandbox::make(const std::string& rel) {
  std::string p = path(rel);
  fs::create_directories(p);
  return p;
}

pid_t CgroupSandbox::add_sleeper(const std::string& rel) {
  std::string dir = path(rel);
  int ready[2];
  if (::pipe2(ready, O_CLOEXEC) != 0) throw std::runtime_error("pipe failed");
  pid_t pid = ::fork();
  if (pid < 0) throw std::runtime_error("fork failed");
  if (pid == 0) {
    ::close(ready[0]);
    char result = move_to_cgroup(dir, ::getpid()) == 0 ? 1 : 0;
    (void)!::write(ready[1], &result, 1);
    ::close(ready[1]);
    for (;;) ::pause();
  }
  ::close(ready[1]);
  char result = 0;
  (void)!::read(ready[0], &result, 1);
  ::close(ready[0]);
  sleepers_.push_back(pid);
  if (!result) throw std::runtime_error("sleeper could not join " + dir);
  return pid;
}

void CgroupSandbox::kill_sleeper(pid_t pid) {
  auto it = std::find(sleepers_.begin(), sleepers_.end(), pid);
  if (it == sleepers_.end()) return;
  ::kill(pid, SIGKILL);
  ::waitpid(pid, nullptr, 0);
  sleepers_.erase(it);
}

int CgroupSandbox::open_errno(const std::string& rel, const std::string& node, int flags) {
  std::string dir = path(rel);
  pid_t pid = ::fork();
  if (pid < 0) throw std::runtime_error("fork failed");
  if (pid == 0) {
    if (move_to_cgroup(dir, ::getpid()) != 0) _exit(255);
    int fd = ::open(node.c_str(), flags | O_CLOEXEC | O_NONBLOCK);
    _exit(fd >= 0 ? 0 : (errno & 0xff));
  }
  int status = 0;
  ::waitpid(pid, &status, 0);
  if (!WIFEXITED(status) || WEXITSTATUS(status) == 255)
    throw std::runtime_error("open probe could not join " + dir);
  return WEXITSTATUS(status);
}

int CgroupSandbox::allow(const std::string& rel, const std::string& rule) {
  return write_kernel_file(path(rel) + "/devices.allow", rule);
}

int CgroupSandbox::deny(const std::string& rel, const std::string& rule) {
  return write_kernel_file(path(rel) + "/devices.deny", rule);
}

std::string CgroupSandbox::devices_list(const std::string& rel) const {
  std::ifstream in(path(rel) + "/devices.list");
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

void CgroupSandbox::remove(const std::string& rel) {
  std::string dir = path(rel);
  for (auto it = sleepers_.begin(); it != sleepers_.end();) {
    std::ifstream cg("/proc/" + std::to_string(*it) + "/cgroup");
    std::string line;
    bool inside = false;
    while (std::getline(cg, line)) {
      auto colon = line.rfind(':');
      if (colon != std::string::npos && (hierarchy_root_ + line.substr(colon + 1)).rfind(dir, 0) == 0) inside = true;
    }
    if (inside) {
      ::kill(*it, SIGKILL);
      ::waitpid(*it, nullptr, 0);
      it = sleepers_.erase(it);
    } else {
      ++it;
    }
  }
  remove_cgroup_tree(dir);
}

}  // namespace gdw::test
