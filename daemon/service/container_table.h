// The containers the daemon knows, by cgroup directory and by cgroup id (what the probe
// reports). Every container has its id from the moment it is seen, GPU container or not,
// so a write to one that is not (yet) a GPU container can still be kept for attribution.
#pragma once

#include <cstdint>
#include <functional>
#include <unordered_map>
#include <string>
#include <vector>

#include "service/watched_container.h"

namespace gdw {

class ContainerTable {
 public:
  // Hashed: the event path looks a container up by directory (inotify) or cgroup id (the
  // probe) on every event, and a tree map compared long, mostly shared path prefixes at
  // each of its levels. Elements never move (node-based), so the id index holds pointers.
  using Map = std::unordered_map<std::string, WatchedContainer>;

  // The container at `cg.cgroup_dir`, created when new (`inserted`).
  std::pair<WatchedContainer&, bool> upsert(const DiscoveredContainer& cg, const Config& config);
  WatchedContainer* find(const std::string& dir);
  WatchedContainer* by_cgroup_id(std::uint64_t id);
  void set_cgroup_id(WatchedContainer& w, std::uint64_t id);
  void erase(const std::string& dir);
  void clear();

  // The directories of the containers `which` selects (in no particular order): a stable
  // list to act on while actions may remove containers.
  std::vector<std::string> dirs(const std::function<bool(const WatchedContainer&)>& which) const;

  Map::iterator begin() { return by_dir_.begin(); }
  Map::iterator end() { return by_dir_.end(); }
  Map::const_iterator begin() const { return by_dir_.begin(); }
  Map::const_iterator end() const { return by_dir_.end(); }
  std::size_t size() const { return by_dir_.size(); }
  bool contains(const std::string& dir) const { return by_dir_.count(dir) > 0; }

 private:
  Map by_dir_;
  // Sorted by id, searched by bisection: a node's few hundred entries stay in a few pages
  // that a storm keeps warm, where a hashed node list cost several cache misses per lookup
  // (two lookups per repair; bench/storm). Changes come with containers, not with events.
  using IdEntry = std::pair<std::uint64_t, WatchedContainer*>;
  std::vector<IdEntry> by_cgroup_id_;
  std::vector<IdEntry>::iterator id_position(std::uint64_t id);
  void forget_id(std::uint64_t id);
};

}  // namespace gdw
