// The device sets the node's GPU containers want on cgroup v2, each once, with how many
// containers want it: what the wrapper cache loads ahead for a runtime program that a
// repair has just met (device_program_cache.h). A wrapper's code depends only on the
// devices it adds (type, numbers, access) and the code it wraps, so a set is kept as those
// fields packed into bytes: the same bytes start the wrapper cache's keys.
//
// A hint, not a record anyone relies on: containers are told apart by a hash of their
// cgroup directory (8 bytes rather than the path kept twice), and a collision only makes
// one set's count wrong, which changes which wrappers are loaded ahead, never what any
// repair grants. Pure: no system calls.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "core/desired_state.h"

namespace gdw {

// `wanted` as the bytes a wrapper's key starts with: type, major, minor, access of each.
std::string packed_device_set(const std::vector<WantedDevice>& wanted);
// The devices of packed_device_set() bytes (names and reasons empty: a wrapper's code has
// no use for them).
std::vector<WantedDevice> unpacked_device_set(std::string_view packed);

class WantedDeviceSets {
 public:
  // Container `dir` wants `wanted` now; an empty set takes it out.
  void want(const std::string& dir, const std::vector<WantedDevice>& wanted);
  // Container `dir` is gone.
  void forget(const std::string& dir);
  // The distinct sets (packed), those most containers want first, at most `max`.
  std::vector<std::string> most_wanted(std::size_t max) const;
  std::size_t size() const { return sets_.size(); }

 private:
  using Sets = std::unordered_map<std::string, std::size_t>;  // packed set → containers wanting it
  void release(Sets::value_type* set);

  Sets sets_;
  // Hash of a container's directory → its set (element pointers outlive rehashes).
  std::unordered_map<std::uint64_t, Sets::value_type*> by_dir_;
};

}  // namespace gdw
