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

// How much BundleIndex::refresh() re-reads.
enum class BundleRefreshDepth {
  // Every state directory listed, every config.json's stamp compared (startup, SIGHUP,
  // after an inotify overflow).
  kEveryStamp,
  // Only the state directories whose listing changed since the last refresh are listed
  // again; in the others, only the bundles that were listed but not loaded (a config.json
  // written late, one that did not parse) are looked at again. The periodic resync.
  kChangedListings,
};

struct Bundle {
  std::string container_id;
  std::string config_path;
  OciContainerInfo info;
};

// The pid file the runtime writes beside the bundle once its create has ended (runc and
// crun write --pid-file last, after the device policy is applied and checked): containerd's
// shim asks for <bundle>/init.pid, CRI-O's conmon for <userdata>/pidfile. Empty where the
// runtime is not known to write one.
std::string create_pid_file(const Bundle& bundle);

class BundleIndex {
 public:
  explicit BundleIndex(std::vector<std::string> state_dirs);

  // Rescans the state directories (`depth`). A config.json whose inode, size and mtime did
  // not change is not parsed again; bundles that disappeared from a listed directory are
  // dropped.
  void refresh(BundleRefreshDepth depth = BundleRefreshDepth::kEveryStamp);
  // How many state directories the last refresh() listed (the others were unchanged).
  std::size_t last_listed_dirs() const { return last_listed_dirs_; }
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
    long ctime_ns = 0;
    bool operator==(const Stamp&) const = default;
  };
  struct Entry {
    Bundle bundle;
    Stamp stamp;
    std::size_t source = 0;      // state directory index * layouts + layout index
    std::uint64_t seen = 0;      // the refresh() that last found it
  };
  // A state directory as its last listing found it.
  struct Listing {
    std::optional<Stamp> stamp;       // the directory's, when it can tell a later change
    std::vector<std::string> unloaded;  // entries without a bundle indexed (yet)
  };
  // Lists state directory `index` again and loads what it holds.
  void relist(std::size_t index);
  // Reads <state_dirs_[dir_index]>/<id>/... if present (relative to dir_fd, the state
  // directory open, or AT_FDCWD); returns whether a bundle is indexed afterwards.
  bool load(std::size_t dir_index, int dir_fd, std::string_view id);

  std::vector<std::string> state_dirs_;
  std::map<std::string, Entry, std::less<>> bundles_;
  std::vector<Listing> listings_;  // one per state directory
  std::size_t last_listed_dirs_ = 0;
  std::uint64_t refreshes_ = 0;
  std::map<std::string, std::string> problems_;
  std::uint64_t generation_ = 0;
};

}  // namespace gdw
