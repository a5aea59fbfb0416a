// The container fleet's inotify queue: the kubepods tree's directories (containers appear
// and go), the pod and QoS cgroups' devices.deny (a parent deny silently strips every
// child's exception), and each GPU container's rule files (those whose writes can revoke,
// and while it misses devices those that can only restore). read() sorts a batch of events
// into what to look at; the fleet acts on it.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "metrics/daemon_metrics.h"
#include "service/watch_registry.h"
#include "service/watched_container.h"
#include "watch/inotify.h"

namespace gdw {

// One batch of events, sorted.
struct ContainerEvents {
  bool overflow = false;  // events were lost: scan the tree and check everything again
  std::vector<std::uint64_t> rule_writes;  // container cgroup ids whose rule files were written (deduplicated)
  std::vector<std::string> rule_write_dirs;  // ... of containers whose id is not known (their cgroup vanished)
  std::vector<std::string> parent_denies;  // pod/QoS directories whose devices.deny was written
  struct TreeChange {
    std::string path;  // the directory created or removed
    bool created;
  };
  std::vector<TreeChange> tree;
  // A file written in the bundle directory of a container in create (maybe its pid file).
  struct CreateFile {
    std::string cgroup_dir;
    std::string name;
  };
  std::vector<CreateFile> create_files;
  // Only rule files were written (a storm's revoke-and-repair): nothing was added, dropped
  // or re-resolved.
  bool only_rule_writes() const { return !overflow && parent_denies.empty() && tree.empty(); }
};

class ContainerWatches {
 public:
  explicit ContainerWatches(DaemonMetrics metrics) : metrics_(metrics) {}
  Status start();
  int fd() const { return inotify_ ? inotify_->fd() : -1; }

  ContainerEvents read();
  // A QoS or pod directory of the tree (or its parent): its children and its devices.deny.
  void watch_tree_dir(const std::string& dir);
  // A GPU container: the files of its cgroup whose writes can revoke.
  void watch_rule_files(WatchedContainer& w, const std::vector<std::string>& files);
  // While `w` misses devices, and only then, the files whose writes can only restore.
  void watch_restoring_files(WatchedContainer& w, const std::vector<std::string>& files);
  // While `w`'s create has not ended: the directory of its pid file `marker` (a runtime
  // renames it into place, runc, or writes it there, crun).
  void watch_create(WatchedContainer& w, const std::string& marker);
  void unwatch_create(WatchedContainer& w);
  // Every watch of `w`.
  void unwatch(WatchedContainer& w);
  void clear();

 private:
  std::optional<Inotify> inotify_;
  std::optional<WatchRegistry> watches_;
  DaemonMetrics metrics_;
};

}  // namespace gdw
