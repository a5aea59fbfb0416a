#include "service/container_watches.h"

#include <sys/inotify.h>

#include <algorithm>

#include "log/log.h"

namespace gdw {
namespace {

constexpr std::uint32_t kTreeMask = IN_CREATE | IN_DELETE | IN_MOVED_TO | IN_MOVED_FROM | IN_ONLYDIR;
constexpr std::uint32_t kDevicesFileMask = IN_MODIFY;

std::vector<int> watch_files(WatchRegistry& watches, const WatchedContainer& w, const std::vector<std::string>& files) {
  std::vector<int> wds;
  for (const auto& file : files) {
    int wd = watches.add(w.cgroup.cgroup_dir + "/" + file, kDevicesFileMask,
                         {WatchTarget::kContainerFile, w.cgroup.cgroup_dir, w.cgroup_id});
    if (wd >= 0) wds.push_back(wd);
  }
  return wds;
}

}  // namespace

Status ContainerWatches::start() {
  auto in = Inotify::create();
  if (!in) return in.error();
  inotify_.emplace(std::move(*in));
  watches_.emplace(*inotify_, metrics_);
  return {};
}

void ContainerWatches::watch_tree_dir(const std::string& dir) {
  watches_->add(dir, kTreeMask, {WatchTarget::kTreeDir, dir});
  // A deny on a parent silently strips the exception from every child (no event there).
  watches_->add(dir + "/devices.deny", kDevicesFileMask, {WatchTarget::kParentDenyFile, dir});
}

void ContainerWatches::watch_rule_files(WatchedContainer& w, const std::vector<std::string>& files) {
  auto wds = watch_files(*watches_, w, files);
  w.wds.insert(w.wds.end(), wds.begin(), wds.end());
}

void ContainerWatches::watch_restoring_files(WatchedContainer& w, const std::vector<std::string>& files) {
  const bool wanted = !w.repair.missing.empty();
  if (wanted == !w.restoring_wds.empty()) return;
  for (int wd : w.restoring_wds) watches_->drop(wd);
  w.restoring_wds.clear();
  if (wanted) w.restoring_wds = watch_files(*watches_, w, files);
}

void ContainerWatches::watch_create(WatchedContainer& w, const std::string& marker) {
  if (w.create_wd >= 0) return;
  const std::size_t slash = marker.rfind('/');
  if (slash == std::string::npos || slash == 0) return;
  w.create_wd = watches_->add(marker.substr(0, slash), IN_MOVED_TO | IN_CLOSE_WRITE | IN_ONLYDIR,
                              {WatchTarget::kCreateDir, w.cgroup.cgroup_dir});
}

void ContainerWatches::unwatch_create(WatchedContainer& w) {
  if (w.create_wd < 0) return;
  watches_->drop(w.create_wd);
  w.create_wd = -1;
}

void ContainerWatches::unwatch(WatchedContainer& w) {
  unwatch_create(w);
  for (int wd : w.wds) watches_->drop(wd);
  for (int wd : w.restoring_wds) watches_->drop(wd);
  w.wds.clear();
  w.restoring_wds.clear();
}

void ContainerWatches::clear() { watches_->clear(); }

ContainerEvents ContainerWatches::read() {
  ContainerEvents out;
  out.overflow = watches_->drain([&out](const Inotify::Event& ev, const WatchTarget& target) {
    switch (target.kind) {
      case WatchTarget::kContainerFile:  // a storm's event: nothing else to do now
        if (target.cgroup_id)
          out.rule_writes.push_back(target.cgroup_id);
        else
          out.rule_write_dirs.push_back(target.path);
        break;
      case WatchTarget::kParentDenyFile:
        out.parent_denies.push_back(target.path);
        break;
      case WatchTarget::kCreateDir:
        if (!ev.name.empty()) out.create_files.push_back({target.path, ev.name});
        break;
      case WatchTarget::kTreeDir:
        if ((ev.mask & IN_ISDIR) && !ev.name.empty())
          out.tree.push_back({target.path + "/" + ev.name, (ev.mask & (IN_CREATE | IN_MOVED_TO)) != 0});
        break;
      default:
        break;
    }
  });
  if (out.overflow) return out;
  std::sort(out.rule_writes.begin(), out.rule_writes.end());
  out.rule_writes.erase(std::unique(out.rule_writes.begin(), out.rule_writes.end()), out.rule_writes.end());
  return out;
}

}  // namespace gdw
