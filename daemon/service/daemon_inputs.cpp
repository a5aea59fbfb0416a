// The daemon's inputs: the full resync, inotify events (kubepods tree, container rule
// files, parent denies, checkpoint, bundles, dev root, CDI specs) and the reloads they ask for.
#include <sys/inotify.h>
#include <sys/stat.h>

#include <algorithm>
#include <string_view>
#include <unordered_set>

#include "cdi/cdi_spec.h"
#include "log/log.h"
#include "service/daemon.h"

namespace gdw {
namespace {

constexpr std::uint32_t kTreeMask = IN_CREATE | IN_DELETE | IN_MOVED_TO | IN_MOVED_FROM | IN_ONLYDIR;
constexpr std::uint32_t kDevicesFileMask = IN_MODIFY;
// After a container cgroup appears, its bundle should already exist; if not (a runtime
// that writes config.json late), look again shortly (daemon_containers.cpp retries more).
constexpr Clock::duration kFirstIdentifyRetry = std::chrono::milliseconds(10);

// The resyncs that compare every bundle's config.json again (BundleIndex::refresh explains
// why the periodic one need not): what an operator asks for with SIGHUP, what follows lost
// events, and the first.
constexpr std::string_view kEveryBundleStampReasons[] = {"startup", "reload", "overflow"};

BundleRefreshDepth bundle_refresh_depth(std::string_view reason) {
  for (auto r : kEveryBundleStampReasons)
    if (r == reason) return BundleRefreshDepth::kEveryStamp;
  return BundleRefreshDepth::kChangedListings;
}

double seconds_since(Clock::time_point t) { return std::chrono::duration<double>(Clock::now() - t).count(); }
std::string base_name(const std::string& path) { return path.substr(path.rfind('/') + 1); }
std::string dir_name(const std::string& path) { return path.substr(0, path.rfind('/')); }

}  // namespace

bool Daemon::locate_tree() {
  if (located_) return true;
  if (auto s = node_->locate(); !s) {
    if (locate_error_.first()) log::warn(s.error().message + "; will look again at every resync");
    return false;
  }
  located_ = true;
  locate_error_.reset();
  access_ = make_device_access(node_->version());
  // cgroup_mkdir reports hierarchies by id (cgroup2: 0; a v1 controller's from
  // <devices.proc_root>/cgroups). Without it, inotify alone finds new containers.
  tree_hierarchy_id_.reset();
  if (auto id = access_->hierarchy_id(config_.devices.proc_root)) {
    tree_hierarchy_id_ = *id;
  } else {
    log::warn(id.error().message + "; new containers are found by inotify alone");
  }
  log::info("watching " + node_->kubepods().dir());
  return true;
}

void Daemon::full_resync(const std::string& reason) {
  const auto start = Clock::now();
  if (!locate_tree()) {
    metrics_.resync(reason, seconds_since(start));
    update_gauges();
    return;
  }
  ensure_input_watches();
  node_->load_inventory();
  reload_checkpoint();
  node_->bundles().refresh(bundle_refresh_depth(reason));
  node_->rebuild_allocations();  // PodResources entries map to pods through the bundles
  health_->checkpoint_or_inventory_changed();
  maybe_query_nvml();

  watch_tree_dir(node_->kubepods().dir());
  KubepodsTree tree = node_->scan();
  for (const auto& dir : tree.parent_dirs) watch_tree_dir(dir);
  // Hashed views of the tree's own strings: 500 long paths with long common prefixes are
  // costly to copy and to order.
  std::unordered_set<std::string_view> present;
  present.reserve(tree.containers.size());
  for (const auto& cg : tree.containers) {
    present.insert(cg.cgroup_dir);
    upsert_container(cg, /*check_new=*/false);  // all checked below
  }
  for (const auto& dir : containers_.dirs([&](const Watched& w) { return !present.count(w.cgroup.cgroup_dir); }))
    remove_container(dir);
  // upsert re-resolved every container against the inputs just loaded; now check them.
  check_gpu_containers();
  update_gauges();
  metrics_.resync(reason, seconds_since(start));
  log::debug("resync (" + reason + ") of " + std::to_string(containers_.size()) + " container(s) took " +
             std::to_string(seconds_since(start) * 1000) + " ms");
}

void Daemon::watch_tree_dir(const std::string& dir) {
  watches_->add(dir, kTreeMask, {WatchTarget::kTreeDir, dir});
  // A deny on a parent silently strips the exception from every child (no event there).
  watches_->add(dir + "/devices.deny", kDevicesFileMask, {WatchTarget::kParentDenyFile, dir});
}

void Daemon::ensure_input_watches() {
  const std::string& ckpt = config_.kubelet.checkpoint;
  watches_->add(dir_name(ckpt), IN_MOVED_TO | IN_CLOSE_WRITE | IN_DELETE | IN_ONLYDIR,
                {WatchTarget::kCheckpointDir, dir_name(ckpt)});
  for (const auto& dir : config_.runtime.state_dirs)
    watches_->add(dir, IN_CREATE | IN_MOVED_TO | IN_DELETE | IN_ONLYDIR, {WatchTarget::kBundleDir, dir});
  for (const auto& dir : {config_.devices.dev_root, config_.devices.dev_root + "/nvidia-caps"})
    watches_->add(dir, IN_CREATE | IN_DELETE | IN_MOVED_TO | IN_ATTRIB | IN_ONLYDIR, {WatchTarget::kDevDir, dir});
  for (const auto& dir : config_.cdi.spec_dirs)
    watches_->add(dir, IN_CLOSE_WRITE | IN_MOVED_TO | IN_MOVED_FROM | IN_DELETE | IN_ONLYDIR, {WatchTarget::kCdiDir, dir});
}

void Daemon::on_inotify() {
  auto events = inotify_->read_queued();
  const auto trigger = Clock::now();
  if (!events) {
    metrics_.event_loop_error("inotify");
    log::error(events.error().message);
    return;
  }
  // The probe has the loop's lowest priority (probe_link.cpp). A revoking write's record
  // is taken at its permission check, so it is already waiting: read what waits first (at
  // most one budget of records, rule writes before denied opens) so the repair names the writer.
  probe_->drain();
  std::vector<std::string> dirty;  // container directories to check (deduplicated below)
  std::vector<std::uint64_t> dirty_ids;  // ... of containers known by cgroup id (most)
  bool only_rule_writes = true;    // else the batch may add, drop or re-resolve containers
  for (const auto& ev : *events) {
    if (ev.mask & IN_Q_OVERFLOW) {
      metrics_.inotify_overflow();
      log::warn("inotify queue overflowed; resyncing everything");
      full_resync("overflow");
      return;
    }
    const WatchTarget* found = watches_->find(ev.wd);
    if (!found) continue;
    if (ev.mask & IN_IGNORED) {
      watches_->forget(ev.wd);
      continue;
    }
    if (found->kind == WatchTarget::kContainerFile) {  // a storm's event: nothing else to do now
      if (found->cgroup_id)
        dirty_ids.push_back(found->cgroup_id);
      else
        dirty.push_back(found->path);
      continue;
    }
    const WatchTarget target = *found;  // handling it may drop the watch
    only_rule_writes &= target.kind == WatchTarget::kParentDenyFile;
    on_watch_event(target, ev, trigger, dirty);
  }
  std::sort(dirty.begin(), dirty.end());
  dirty.erase(std::unique(dirty.begin(), dirty.end()), dirty.end());
  std::sort(dirty_ids.begin(), dirty_ids.end());
  dirty_ids.erase(std::unique(dirty_ids.begin(), dirty_ids.end()), dirty_ids.end());
  // A storm's revoke-and-repair leaves every count as it was: no O(N) gauge walk for it.
  const bool moved = check_ids(trigger, dirty_ids);
  if (check_dirs(trigger, dirty) || moved || !only_rule_writes) gauges_changed();
}

void Daemon::on_watch_event(const WatchTarget& target, const Inotify::Event& ev, Clock::time_point trigger,
                            std::vector<std::string>& dirty) {
  switch (target.kind) {
    case WatchTarget::kContainerFile:  // on_inotify resolves these itself (by cgroup id)
      break;
    case WatchTarget::kParentDenyFile:
      for (const auto& [dir, w] : containers_)
        if (dir.rfind(target.path + "/", 0) == 0) dirty.push_back(dir);
      break;
    case WatchTarget::kTreeDir:
      on_tree_event(target.path, ev);
      break;
    case WatchTarget::kCheckpointDir:
      if (ev.name == base_name(config_.kubelet.checkpoint)) {
        reload_checkpoint();
        maybe_query_nvml();  // a MIG device it names may be new (geometry change)
        reresolve_all();
      }
      break;
    case WatchTarget::kBundleDir:
      for (auto& [dir, w] : containers_) {
        if (w.target.kind == TargetKind::kUnidentified && w.cgroup.leaf.container_id == ev.name) {
          w.identify_attempts = 0;
          schedule_retry(w, kFirstIdentifyRetry, trigger);
        }
      }
      break;
    case WatchTarget::kCdiDir:  // a refreshed or new CDI spec (per-claim specs of DRA drivers)
      if (is_cdi_spec_file_name(ev.name)) {
        reload_inventory();
        reresolve_all();
      }
      break;
    case WatchTarget::kDevDir:
      if (ev.name.rfind("nvidia", 0) == 0) {
        reload_inventory();
        reresolve_all();
      }
      break;
  }
}

void Daemon::on_tree_event(const std::string& dir, const Inotify::Event& ev) {
  if (!(ev.mask & IN_ISDIR) || ev.name.empty()) return;
  const std::string path = dir + "/" + ev.name;
  if (ev.mask & (IN_CREATE | IN_MOVED_TO)) {
    dir_created(path);
  } else if (ev.mask & (IN_DELETE | IN_MOVED_FROM)) {
    node_->tree_dir_removed(path);
    for (const auto& d : containers_.dirs([&](const Watched& w) {
           const std::string& c = w.cgroup.cgroup_dir;
           return c == path || c.rfind(path + "/", 0) == 0;
         }))
      remove_container(d);
  }
}

void Daemon::dir_created(const std::string& path) {
  auto kind = classify_cgroup_dir(node_->kubepods(), path);
  if (!kind) return;
  if (kind->level == CgroupDirKind::kContainer) {
    upsert_container(*kind->container);
    return;
  }
  // A QoS or pod cgroup: watch it first, then look at what was created before the watch.
  watch_tree_dir(path);
  KubepodsTree tree = node_->scan();
  for (const auto& d : tree.parent_dirs)
    if (d.rfind(path + "/", 0) == 0) watch_tree_dir(d);
  for (const auto& cg : tree.containers)
    if (cg.cgroup_dir.rfind(path + "/", 0) == 0 && !containers_.contains(cg.cgroup_dir)) upsert_container(cg);
}

void Daemon::reload_checkpoint() {
  auto s = node_->load_checkpoint();
  metrics_.set_checkpoint_loaded(s.ok());
  if (!s) {
    log::warn(s.error().message + (node_->checkpoint().loaded ? "; keeping the last good record" : ""));
    return;
  }
  const auto& cp = node_->checkpoint().checkpoint;
  metrics_.set_checkpoint_checksum_valid(cp.checksum_valid);
  struct stat st{};
  if (::stat(config_.kubelet.checkpoint.c_str(), &st) == 0)
    metrics_.set_checkpoint_last_write(static_cast<double>(st.st_mtim.tv_sec) + st.st_mtim.tv_nsec / 1e9);
  health_->checkpoint_or_inventory_changed();
  if (!cp.checksum_valid) {
    log::warn("kubelet checkpoint checksum does not verify (stored " + std::to_string(cp.stored_checksum) +
              ", computed " + std::to_string(cp.computed_checksum) + "); its entries are " +
              (node_->checkpoint().used ? "used" : "ignored (kubelet.on_invalid_checksum: ignore)"));
  }
  for (const auto& e : cp.entry_errors)
    log::warn("kubelet checkpoint entry " + std::to_string(e.index) + " (pod " + e.pod_uid + ", container " +
              e.container_name + "): " + e.message);
}

void Daemon::reload_inventory() {
  node_->load_inventory();
  health_->checkpoint_or_inventory_changed();
  maybe_query_nvml();
}

bool Daemon::maybe_query_nvml(bool force) {
  if (nvml_->running()) return true;
  // `force`: the stale-checkpoint check needs a fresh answer even with every MIG device
  // mapped (its cached answer is what may be out of date). A failed query still backs off.
  if (!force && !node_->needs_nvml()) return false;
  return nvml_->start(config_);
}

}  // namespace gdw
