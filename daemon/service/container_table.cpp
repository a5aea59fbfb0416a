#include "service/container_table.h"

namespace gdw {

std::pair<WatchedContainer&, bool> ContainerTable::upsert(const DiscoveredContainer& cg, const Config& config) {
  auto [it, inserted] = by_dir_.try_emplace(cg.cgroup_dir, cg, RepairBudget(config.repair.burst, config.repair.max_per_minute),
                                            RepairLogLimit(config.repair.log_burst, config.repair.log_interval));
  return {it->second, inserted};
}

WatchedContainer* ContainerTable::find(const std::string& dir) {
  auto it = by_dir_.find(dir);
  return it == by_dir_.end() ? nullptr : &it->second;
}

WatchedContainer* ContainerTable::by_cgroup_id(std::uint64_t id) {
  auto it = by_cgroup_id_.find(id);
  return it == by_cgroup_id_.end() ? nullptr : it->second;
}

void ContainerTable::set_cgroup_id(WatchedContainer& w, std::uint64_t id) {
  if (w.cgroup_id) by_cgroup_id_.erase(w.cgroup_id);
  w.cgroup_id = id;
  if (id) by_cgroup_id_[id] = &w;
}

void ContainerTable::erase(const std::string& dir) {
  auto it = by_dir_.find(dir);
  if (it == by_dir_.end()) return;
  if (it->second.cgroup_id) by_cgroup_id_.erase(it->second.cgroup_id);
  by_dir_.erase(it);
}

void ContainerTable::clear() {
  by_dir_.clear();
  by_cgroup_id_.clear();
}

std::vector<std::string> ContainerTable::dirs(const std::function<bool(const WatchedContainer&)>& which) const {
  std::vector<std::string> out;
  for (const auto& [dir, w] : by_dir_)
    if (which(w)) out.push_back(dir);
  return out;
}

}  // namespace gdw
