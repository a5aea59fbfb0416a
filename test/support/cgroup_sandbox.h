// Real cgroups for privileged tests, under a unique per-run parent
// (/sys/fs/cgroup/<hierarchy>/gdw-test-<pid>-<n>). Holds only processes the test started;
// everything is killed by PID and removed, deepest first, when the sandbox goes away.
#pragma once

#include <fcntl.h>
#include <sys/types.h>

#include <string>
#include <vector>

namespace gdw::test {

class CgroupSandbox {
 public:
  // hierarchy: "devices" (v1) or "unified" (v2); cgroup_root is normally /sys/fs/cgroup.
  // "unified" is the cgroup2 hierarchy wherever it is mounted: cgroup_root/unified on a
  // hybrid host (these VMs), cgroup_root itself on a pure v2 one (a GPU node, the kernel
  // matrix's guests).
  explicit CgroupSandbox(const std::string& hierarchy = "devices", const std::string& tag = "",
                         const std::string& cgroup_root = "/sys/fs/cgroup");
  ~CgroupSandbox();
  CgroupSandbox(const CgroupSandbox&) = delete;
  CgroupSandbox& operator=(const CgroupSandbox&) = delete;

  // True when this process can create cgroups in the hierarchy (root, mounted, writable).
  static bool available(const std::string& hierarchy = "devices", const std::string& cgroup_root = "/sys/fs/cgroup");

  const std::string& hierarchy_root() const { return hierarchy_root_; }  // /sys/fs/cgroup/devices
  const std::string& name() const { return name_; }                      // gdw-test-123-0
  std::string path(const std::string& rel = "") const;                    // absolute
  // mkdir -p below the sandbox parent; returns the absolute path.
  std::string make(const std::string& rel);
  // Starts a process that sleeps inside <rel>; killed by PID at the end.
  pid_t add_sleeper(const std::string& rel);
  // A process someone else started inside the sandbox, killed by PID with the sleepers.
  void adopt_sleeper(pid_t pid) { sleepers_.push_back(pid); }
  void kill_sleeper(pid_t pid);
  // Forks a process, moves it into <rel>, opens `node` there and reports the errno
  // (0 when the open succeeded). This is how tests prove or disprove a grant.
  int open_errno(const std::string& rel, const std::string& node, int flags = O_RDWR);
  // v1: writes one rule to devices.allow / devices.deny of <rel>; returns errno (0 = ok).
  int allow(const std::string& rel, const std::string& rule);
  int deny(const std::string& rel, const std::string& rule);
  std::string devices_list(const std::string& rel) const;
  // Removes <rel> (and below) early, e.g. to simulate a pod deletion; kills its sleepers.
  void remove(const std::string& rel);

 private:
  std::string hierarchy_root_;
  std::string name_;
  std::vector<pid_t> sleepers_;
};

// The directory of the hierarchy `hierarchy` below `cgroup_root`, "unified" resolved as
// above: /sys/fs/cgroup/unified or, on a pure v2 host, /sys/fs/cgroup.
std::string hierarchy_dir(const std::string& hierarchy, const std::string& cgroup_root = "/sys/fs/cgroup");
// The cgroup2 hierarchy: hierarchy_dir("unified").
inline std::string cgroup2_root() { return hierarchy_dir("unified"); }

// Writes `content` to an existing (kernel) file in one write(); returns errno (0 = ok).
int write_kernel_file(const std::string& path, const std::string& content);
// Moves process `pid` into the cgroup directory `dir`; returns errno.
int move_to_cgroup(const std::string& dir, pid_t pid);
// Removes a cgroup directory tree deepest first (each must be empty of processes).
void remove_cgroup_tree(const std::string& dir);

// A real runtime makes a container's cgroup in every v1 controller (or only in cgroup2): on
// destruction, the tree `name` (a test's parent, below each hierarchy's root) is removed from
// every hierarchy. Declared before what starts containers, so that it goes last.
struct EveryHierarchyCleanup {
  std::string name;  // empty: nothing to remove
  ~EveryHierarchyCleanup();
};

}  // namespace gdw::test
