// What a repair on cgroup v2 would otherwise read and build again at every event:
// - a device program's description (name, owner, translated instructions, what a wrapper
//   of ours wraps and adds). A program never changes while it exists and the kernel does
//   not reuse its id while the daemon runs (ids count up to 2^31), so it is read once by id:
//   three bpf() calls saved per program per look.
// - our wrapper for a given original and set of devices, loaded once. A re-applier that
//   applies the same spec again attaches a program with the same instructions, whose
//   wrapper is the one already loaded: the repair attaches it without a verifier run.
// Both are bounded (least recently used go first). A wrapper dropped from the cache stays
// loaded while it is attached somewhere (the kernel holds it), and is freed after.
#pragma once

#include <cstdint>
#include <list>
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

#include "backend/device_programs_v2.h"
#include "core/result.h"

namespace gdw {

class DeviceProgramCache {
 public:
  explicit DeviceProgramCache(std::size_t max_programs = 1024, std::size_t max_wrappers = 512)
      : max_programs_(max_programs), max_wrappers_(max_wrappers) {}
  ~DeviceProgramCache();
  DeviceProgramCache(const DeviceProgramCache&) = delete;
  DeviceProgramCache& operator=(const DeviceProgramCache&) = delete;

  // Program `id` described (subgroup and link are the caller's to set); nullopt when it is
  // gone.
  std::optional<AttachedDeviceProgram> describe(std::uint32_t id);
  // Our wrapper adding `added` to `inner`, loaded; an fd this cache owns (valid until the
  // next call). The error names `dir` and `old_id` (the program it is for) and the
  // verifier's words.
  Result<int> wrapper(const std::vector<WantedDevice>& added, const BpfCode& inner, const std::string& dir,
                      std::uint32_t old_id);

  std::size_t programs() const { return programs_.size(); }
  std::size_t wrappers() const { return wrappers_.size(); }
  std::size_t wrapper_loads() const { return wrapper_loads_; }  // verifier runs so far

 private:
  // Least recently used first out.
  template <class Key, class Value>
  struct Lru {
    std::list<std::pair<Key, Value>> order;  // most recently used first
    std::unordered_map<Key, typename std::list<std::pair<Key, Value>>::iterator> index;
    Value* find(const Key& key);  // and marks it used
    // Adds (key, value); returns the values pushed out beyond `max`.
    std::vector<Value> add(Key key, Value value, std::size_t max);
    std::size_t size() const { return index.size(); }
  };
  std::size_t max_programs_, max_wrappers_;
  Lru<std::uint32_t, AttachedDeviceProgram> programs_;
  Lru<std::string, int> wrappers_;  // (added, inner) as bytes → fd
  std::size_t wrapper_loads_ = 0;
};

}  // namespace gdw
