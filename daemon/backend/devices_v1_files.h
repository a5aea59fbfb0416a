// cgroup v1 devices controller: read what a cgroup allows (devices.list), grant rules
// (devices.allow, one rule per write(), as the kernel requires).
//
// The files of the containers being repaired are kept open between repairs: a storm re-checks the same containers hundreds of times a second,
// and each open() walks the whole cgroupfs path (a third of a repair's cost, measured with
// bench/storm). A re-read is a pread at 0, which restarts the kernel's seq_file.
// devices.allow is opened along with devices.list at a cgroup's first look: its first
// grant then comes without that walk too, and a node-wide storm is often a container's
// first.
//
// Only files on cgroupfs are kept: a removed cgroup's open file then fails with ENODEV
// instead of showing stale rules, and the path is opened again once (a cgroup re-created
// at the same path is read afresh; a gone one gives ENOENT). Plain files (fixture trees)
// are opened on every call, since they may be replaced by rename.
#pragma once

#include <cstddef>
#include <string>
#include <unordered_map>
#include <vector>

#include "core/device_rule.h"
#include "core/result.h"

namespace gdw {

class DevicesV1Files {
 public:
  // At most `max_cgroups` cgroups' files are kept open (two descriptors each); the others
  // are opened per call (0: every call opens and closes, as a one-off reader does).
  explicit DevicesV1Files(std::size_t max_cgroups) : max_cgroups_(max_cgroups) {}
  ~DevicesV1Files();
  DevicesV1Files(const DevicesV1Files&) = delete;
  DevicesV1Files& operator=(const DevicesV1Files&) = delete;

  // The raw text of <cgroup_dir>/devices.list. Errors carry errno as their code, so callers
  // can tell a removed cgroup (ENOENT/ENODEV, is_cgroup_gone) from a real failure.
  Result<std::string> read_list(const std::string& cgroup_dir);
  // One outcome per rule, in order: written, or an error whose code is the errno (EPERM: the
  // kernel refused, a parent denies; ENOENT/ENODEV: the cgroup is gone).
  std::vector<Status> write_grants(const std::string& cgroup_dir, const std::vector<DeviceRule>& rules);
  // The cgroup is no longer watched: close its files.
  void forget(const std::string& cgroup_dir);
  std::size_t open_files() const;

 private:
  struct Files {
    int list = -1;
    int allow = -1;
  };
  struct Handle {
    int fd = -1;       // -1: cannot be opened (errno set)
    bool owned = false;  // not kept: the caller closes it
    bool kept_before = false;  // opened by an earlier call: may belong to a removed cgroup
  };
  using Map = std::unordered_map<std::string, Files>;  // hashed: looked up at every observation
  using Kept = Map::value_type;
  // The descriptor of devices.list (`list`) or devices.allow of `cgroup_dir`.
  Handle open_file(const std::string& cgroup_dir, bool list);
  void drop(const std::string& cgroup_dir, bool list);
  void open_allow_ahead(const std::string& cgroup_dir);
  // The files kept for `cgroup_dir`, or null.
  Kept* kept(const std::string& cgroup_dir);

  std::size_t max_cgroups_;
  Map files_;
  // The entry found last (a node: rehashing keeps it where it is): a repair reads the list
  // and then writes the grants of one cgroup, so the second lookup is a comparison.
  Kept* last_ = nullptr;
};

}  // namespace gdw
