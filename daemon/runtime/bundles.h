// Finds containers' OCI bundles (config.json) under the runtimes' state directories:
// containerd  <dir>/<id>/config.json          (dir = .../io.containerd.runtime.v2.task/k8s.io)
// CRI-O       <dir>/<id>/userdata/config.json (dir = .../storage/overlay-containers)
// The layout a file was found in tells parse_oci_config which runtime wrote it.
#pragma once

#include <sys/types.h>

#include <map>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "runtime/oci_config.h"

namespace gdw {

struct Bundle {
  std::string container_id;
  std::string config_path;
  OciContainerInfo info;
};

class BundleIndex {
 public:
  explicit BundleIndex(std::vector<std::string> state_dirs);

  // Rescans every state directory. A config.json whose inode, size and mtime did not change
  // is not parsed again; bundles that disappeared are dropped.
  void refresh();
  // Looks one container up, loading its bundle from disk when not indexed yet (a container
  // whose cgroup appeared before the next refresh).
  const Bundle* find_or_load(const std::string& container_id);
  const Bundle* find(const std::string& container_id) const;
  // Drops a container that is gone (its cgroup was removed) without waiting for refresh().
  void forget(const std::string& container_id) { generation_ += bundles_.erase(container_id); }
  // config.json files that could not be read or parsed, with the reason.
  const std::map<std::string, std::string>& problems() const { return problems_; }
  const std::vector<std::string>& state_dirs() const { return state_dirs_; }
  std::size_t size() const { return bundles_.size(); }
  // Moves whenever a bundle is added, changed or dropped: what was resolved against an
  // older generation may be out of date.
  std::uint64_t generation() const { return generation_; }
  std::vector<const Bundle*> all() const;

 private:
  struct Stamp {
    ino_t inode = 0;
    off_t size = 0;
    long mtime_ns = 0;
    bool operator==(const Stamp&) const = default;
  };
  struct Entry {
    Bundle bundle;
    Stamp stamp;
    std::size_t source = 0;      // state directory index * layouts + layout index
    std::uint64_t seen = 0;      // the refresh() that last found it
  };
  // Reads <state_dirs_[dir_index]>/<id>/... if present (relative to dir_fd, the state
  // directory open, or AT_FDCWD); returns whether a bundle is indexed afterwards.
  bool load(std::size_t dir_index, int dir_fd, std::string_view id);

  std::vector<std::string> state_dirs_;
  std::map<std::string, Entry, std::less<>> bundles_;
  std::uint64_t refreshes_ = 0;
  std::map<std::string, std::string> problems_;
  std::uint64_t generation_ = 0;
};

}  // namespace gdw
