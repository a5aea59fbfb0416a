#include "service/container_table.h"

#include <algorithm>

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

std::vector<ContainerTable::IdEntry>::iterator ContainerTable::id_position(std::uint64_t id) {
  return std::lower_bound(by_cgroup_id_.begin(), by_cgroup_id_.end(), id,
                          [](const IdEntry& e, std::uint64_t key) { return e.first < key; });
}

WatchedContainer* ContainerTable::by_cgroup_id(std::uint64_t id) {
  auto it = id_position(id);
  return it != by_cgroup_id_.end() && it->first == id ? it->second : nullptr;
}

void ContainerTable::forget_id(std::uint64_t id) {
  auto it = id_position(id);
  if (it != by_cgroup_id_.end() && it->first == id) by_cgroup_id_.erase(it);
}

void ContainerTable::set_cgroup_id(WatchedContainer& w, std::uint64_t id) {
  if (id && id == w.cgroup_id && by_cgroup_id(id) == &w) return;  // a resync: nothing moves
  if (w.cgroup_id) forget_id(w.cgroup_id);
  w.cgroup_id = id;
  if (!id) return;
  auto it = id_position(id);
  if (it != by_cgroup_id_.end() && it->first == id)
    it->second = &w;
  else
    by_cgroup_id_.insert(it, {id, &w});
}

void ContainerTable::erase(const std::string& dir) {
  auto it = by_dir_.find(dir);
  if (it == by_dir_.end()) return;
  if (it->second.cgroup_id) forget_id(it->second.cgroup_id);
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
