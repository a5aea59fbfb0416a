// A set of device numbers kept sorted in one vector. A container wants a handful of
// devices, and the planner rewrites its set at every check (each repair of a storm): a tree
// set allocated and freed a node per device each time, this allocates nothing once sized.
#pragma once

#include <algorithm>
#include <cstddef>
#include <vector>

#include "core/device_rule.h"

namespace gdw {

class DeviceSet {
 public:
  using const_iterator = std::vector<DeviceNumber>::const_iterator;

  // Whether `d` was new.
  bool insert(const DeviceNumber& d) {
    auto it = std::lower_bound(items_.begin(), items_.end(), d);
    if (it != items_.end() && *it == d) return false;
    items_.insert(it, d);
    return true;
  }
  std::size_t erase(const DeviceNumber& d) {
    auto it = std::lower_bound(items_.begin(), items_.end(), d);
    if (it == items_.end() || *it != d) return 0;
    items_.erase(it);
    return 1;
  }
  std::size_t count(const DeviceNumber& d) const { return std::binary_search(items_.begin(), items_.end(), d) ? 1 : 0; }
  void clear() { items_.clear(); }  // keeps the capacity
  bool empty() const { return items_.empty(); }
  std::size_t size() const { return items_.size(); }
  const_iterator begin() const { return items_.begin(); }
  const_iterator end() const { return items_.end(); }
  bool operator==(const DeviceSet&) const = default;

 private:
  std::vector<DeviceNumber> items_;
};

}  // namespace gdw
