// The container fleet's part that follows the kubepods tree: a full sync, directories
// created and removed, containers dropped, and what the stale-checkpoint remediation asks
// of the fleet (container_fleet.h).
#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <string_view>
#include <unordered_set>

#include "log/log.h"
#include "runtime/cgroup_names.h"
#include "service/container_fleet.h"

namespace gdw {
namespace {

// Whether a cgroup has a process in it: the first bytes of cgroup.procs (cgroupfs, never
// blocking). An unreadable file counts as occupied: in doubt the remediation waits.
bool has_processes(const std::string& cgroup_dir) {
  const int fd = ::open((cgroup_dir + "/cgroup.procs").c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return errno != ENOENT;
  char buf[32];
  const ssize_t n = ::read(fd, buf, sizeof buf);
  ::close(fd);
  return n != 0;
}

bool under(const std::string& path, const std::string& dir) { return path == dir || path.rfind(dir + "/", 0) == 0; }

}  // namespace

void ContainerFleet::sync(const KubepodsTree& tree) {
  watches_.watch_tree_dir(node_.kubepods().dir());
  for (const auto& dir : tree.parent_dirs) watches_.watch_tree_dir(dir);
  // Hashed views of the tree's own strings: 500 long paths with long common prefixes are
  // costly to copy and to order.
  std::unordered_set<std::string_view> present;
  present.reserve(tree.containers.size());
  for (const auto& cg : tree.containers) {
    present.insert(cg.cgroup_dir);
    upsert(cg, /*check_new=*/false);  // all checked below
  }
  for (const auto& dir : containers_.dirs([&](const WatchedContainer& w) { return !present.count(w.cgroup.cgroup_dir); }))
    remove(dir);
  synced_ = true;
  check_gpu_containers();
  update_gauges();
}

void ContainerFleet::remove(const std::string& cgroup_dir) {
  WatchedContainer* w = containers_.find(cgroup_dir);
  if (!w) return;
  watches_.unwatch(*w);
  apply_waits_.forget(cgroup_dir);
  if (access_) access_->forget(cgroup_dir);
  if (w->is_gpu()) {
    probe_.unwatch(*w);
    log::info("GPU container gone", w->log_fields());
  }
  node_metrics_.forget(w->labels);
  node_.bundles().forget(w->cgroup.leaf.container_id);
  gauge_tally_.remove(*w);  // its share leaves the counts
  containers_.erase(cgroup_dir);
}

void ContainerFleet::dir_created(const std::string& path, const ProcessInfo* maker) {
  // crun's sub-cgroup of a GPU container (systemd driver), where crun attaches its device
  // program within a millisecond: the probe must name crun as that program's writer, so that
  // the grant waits for crun's exit. Watched as it appears, from the probe's mkdir record,
  // which names crun too (its attach may come before the watch).
  if (const auto slash = path.rfind('/'); slash != std::string::npos && path.substr(slash + 1) == kCrunSubgroup) {
    if (WatchedContainer* w = containers_.find(path.substr(0, slash)); w && w->is_gpu()) {
      probe_.watch(*w);
      if (maker) hold_for_runtime(*w, *maker);
      return;
    }
  }
  auto kind = classify_cgroup_dir(node_.kubepods(), path);
  if (!kind) return;
  if (kind->level == CgroupDirKind::kContainer) {
    upsert(*kind->container, /*check_new=*/true);
    return;
  }
  // A QoS or pod cgroup: watch it first, then look at what was created before the watch.
  watches_.watch_tree_dir(path);
  KubepodsTree tree = node_.scan();
  for (const auto& d : tree.parent_dirs)
    if (d.rfind(path + "/", 0) == 0) watches_.watch_tree_dir(d);
  for (const auto& cg : tree.containers)
    if (cg.cgroup_dir.rfind(path + "/", 0) == 0 && !containers_.contains(cg.cgroup_dir)) upsert(cg, true);
}

void ContainerFleet::tree_dir_removed(const std::string& path) {
  node_.tree_dir_removed(path);
  for (const auto& d : containers_.dirs([&](const WatchedContainer& w) { return under(w.cgroup.cgroup_dir, path); }))
    remove(d);
}

std::vector<RunningContainer> ContainerFleet::running_containers() const {
  std::vector<RunningContainer> running;
  for (const auto& [dir, w] : containers_) {
    RunningContainer c;
    c.pod_uid = w.cgroup.pod.pod_uid;  // the cgroup path's: the kernel enforces it
    if (w.target.identity && !w.target.identity_conflict) c.container_name = w.target.identity->container_name;
    c.has_processes = has_processes(dir);
    running.push_back(std::move(c));
  }
  return running;
}

std::size_t ContainerFleet::gpu_containers() const {
  std::size_t n = 0;
  for (const auto& [dir, w] : containers_) n += w.is_gpu();
  return n;
}

}  // namespace gdw
