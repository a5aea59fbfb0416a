#include "service/watch_registry.h"

#include <cerrno>

#include "log/log.h"

namespace gdw {

int WatchRegistry::add(const std::string& path, std::uint32_t mask, WatchTarget target) {
  if (auto it = wd_by_path_.find(path); it != wd_by_path_.end()) return it->second;
  auto wd = inotify_.add(path, mask);
  if (!wd) {
    if (wd.error().code != ENOENT && wd.error().code != ENOTDIR) {
      metrics_.event_loop_error("inotify_add_watch");
      log::warn(wd.error().message);
    }
    return -1;
  }
  watches_[*wd] = std::move(target);
  wd_by_path_[path] = *wd;
  return *wd;
}

void WatchRegistry::drop(int wd) {
  inotify_.remove(wd);
  forget(wd);
}

void WatchRegistry::forget(int wd) {
  watches_.erase(wd);
  std::erase_if(wd_by_path_, [wd](const auto& kv) { return kv.second == wd; });
}

void WatchRegistry::clear() {
  for (const auto& [wd, target] : watches_) inotify_.remove(wd);
  watches_.clear();
  wd_by_path_.clear();
}

const WatchTarget* WatchRegistry::find(int wd) const {
  auto it = watches_.find(wd);
  return it == watches_.end() ? nullptr : &it->second;
}

std::optional<std::vector<Inotify::Event>> WatchRegistry::read_queued() {
  auto events = inotify_.read_queued();
  if (events) return std::move(*events);
  metrics_.event_loop_error("inotify");
  log::error(events.error().message);
  return std::nullopt;
}

}  // namespace gdw
