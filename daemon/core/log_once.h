// Logging a lasting problem once: the first sighting is logged, repeats are not, until the
// problem clears (reset) and comes back. One helper instead of an "already logged" flag per
// problem.
#pragma once

#include <set>
#include <utility>

namespace gdw {

// One problem.
class LogOnce {
 public:
  // True the first time since construction or the last reset(): log now.
  bool first() { return !std::exchange(logged_, true); }
  void reset() { logged_ = false; }
  bool logged() const { return logged_; }

 private:
  bool logged_ = false;
};

// One problem per key (a device, a spec file, an identity problem's text).
template <class Key>
class LogOncePer {
 public:
  bool first(const Key& key) { return logged_.insert(key).second; }
  void reset(const Key& key) { logged_.erase(key); }
  void reset_all() { logged_.clear(); }
  // The problems that last are exactly `now`: the others are reset; returns those of `now`
  // not logged before (log them).
  std::set<Key> still(const std::set<Key>& now) {
    std::set<Key> fresh;
    for (const auto& k : now)
      if (!logged_.count(k)) fresh.insert(k);
    logged_ = now;
    return fresh;
  }

 private:
  std::set<Key> logged_;
};

}  // namespace gdw
