// The walk every resync repeats over the kubepods tree, with the QoS and pod directories
// kept open between walks.
//
// At 500 pods, opening and closing each pod directory (a path lookup, a struct file, its
// release) cost more than listing it: listing a kept descriptor again after rewinding it
// takes 2.2 ms down to 0.9 ms per walk (measured on cgroupfs). A kept descriptor is only
// reused for the directory it was opened on: the parent's listing names each entry's inode,
// and on cgroupfs (kernfs) an inode number is never given to another directory (it carries
// a generation), so a directory removed and re-created under the same name is opened
// afresh. On other filesystems (fixture trees), where inode numbers are reused, nothing is
// kept.
#pragma once

#include <sys/types.h>

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <unordered_map>

#include "runtime/discovery.h"

namespace gdw {

class KubepodsScanner {
 public:
  // At most `max_kept` directories stay open between scans (0: none, each scan opens and
  // closes every directory, as a one-off reader does).
  // A long-lived scanner (max_kept > 0) grows the descriptor table now: see
  // reserve_descriptor_table.
  explicit KubepodsScanner(std::size_t max_kept);
  ~KubepodsScanner() { close_all(); }
  KubepodsScanner(const KubepodsScanner&) = delete;
  KubepodsScanner& operator=(const KubepodsScanner&) = delete;

  KubepodsTree scan(const KubepodsLocation& where);
  // `dir` (and anything below it) was removed: its descriptor is closed now, not at the
  // next scan, so a removed cgroup is not kept alive (dying) by us until then.
  void forget(std::string_view dir);
  // Directories kept open now.
  std::size_t kept() const { return kept_.size(); }

 private:
  // An open subdirectory of the last scan's tree (by inode; see above).
  struct Kept {
    int fd = -1;
    std::uint64_t seen = 0;  // the scan that last listed it
    std::string path;
  };
  // A descriptor of `parent`'s entry `name` (listed with inode `ino`), positioned at its
  // start: the kept one when there is one, else opened (and kept while there is room).
  // `owned`: the caller closes it.
  int enter(int parent, std::string_view name, ino_t ino, const std::string& path, bool& owned);
  void close_all();

  std::size_t max_kept_;
  bool keep_ = false;  // this scan's tree is on cgroupfs
  std::uint64_t scans_ = 0;
  std::unordered_map<ino_t, Kept> kept_;
};

// Grows this process's descriptor table to hold `n` descriptors (within RLIMIT_NOFILE).
// The kernel grows it when an open() first needs a higher number and, with threads running,
// waits for an RCU grace period there (5 ms measured): a repair that opens a cgroup's
// devices.allow as the daemon's kept descriptors cross 1024 would wait with it. Growing it
// once at startup takes that wait off the repair path.
void reserve_descriptor_table(std::size_t n);

// How many directories a long-lived scanner keeps: a node's pods, within an eighth of the
// descriptors this process may have.
std::size_t kept_scan_dirs_budget();

}  // namespace gdw
