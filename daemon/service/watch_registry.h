// The daemon's inotify watches and what each is for.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

#include "metrics/daemon_metrics.h"
#include "watch/inotify.h"

namespace gdw {

// What a watch descriptor is for.
struct WatchTarget {
  enum Kind { kContainerFile, kTreeDir, kParentDenyFile, kCheckpointDir, kBundleDir, kDevDir, kCdiDir, kCreateDir } kind;
  std::string path;  // the directory concerned (kCreateDir: the container's cgroup, its bundle's is watched)
  // kContainerFile: the container's cgroup id when known (it never changes for a watched
  // container): an event resolves by it, no path copied or hashed on a storm's hot path.
  std::uint64_t cgroup_id = 0;
};

class WatchRegistry {
 public:
  WatchRegistry(Inotify& inotify, DaemonMetrics metrics) : inotify_(inotify), metrics_(metrics) {}

  // The watch of `path` (an existing one is reused); -1 when it cannot be watched (a path
  // that does not exist is not an error worth a line).
  int add(const std::string& path, std::uint32_t mask, WatchTarget target);
  void drop(int wd);
  // The kernel removed the watch (IN_IGNORED).
  void forget(int wd);
  void clear();
  const WatchTarget* find(int wd) const;

  // Reads what the inotify queue holds and hands `each(event, target)` every event of a
  // watch still registered (IN_IGNORED forgets its watch). true on a queue overflow
  // (counted): the caller rescans what it watches. A read error is counted and logged.
  template <class Each>
  bool drain(Each&& each) {
    auto events = read_queued();
    if (!events) return false;
    for (const auto& ev : *events) {
      if (ev.mask & IN_Q_OVERFLOW) {
        metrics_.inotify_overflow();
        return true;
      }
      const WatchTarget* target = find(ev.wd);
      if (!target) continue;
      if (ev.mask & IN_IGNORED) {
        forget(ev.wd);
        continue;
      }
      each(ev, *target);
    }
    return false;
  }

 private:
  // The queued events; nullopt after a read error (counted and logged).
  std::optional<std::vector<Inotify::Event>> read_queued();

  Inotify& inotify_;
  DaemonMetrics metrics_;
  // Hashed: looked up for every inotify event (node-based, so find()'s pointer stays valid
  // until that watch is dropped).
  std::unordered_map<int, WatchTarget> watches_;
  // The watched file or directory → its watch. Hashed: every resync looks up each pod
  // directory (long paths that share long prefixes, costly to order).
  std::unordered_map<std::string, int> wd_by_path_;
};

}  // namespace gdw
