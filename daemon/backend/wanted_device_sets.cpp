#include "backend/wanted_device_sets.h"

#include <algorithm>
#include <cstring>
#include <functional>

namespace gdw {
namespace {

constexpr std::size_t kFields = 4;  // type, major, minor, access
constexpr std::size_t kPackedDevice = kFields * sizeof(std::uint32_t);

void fields_of(const WantedDevice& d, std::uint32_t (&out)[kFields]) {
  out[0] = static_cast<std::uint32_t>(d.dev.type);
  out[1] = d.dev.major;
  out[2] = d.dev.minor;
  out[3] = d.access;
}

// Whether `packed` is `wanted` packed, without packing it (a look at every check).
bool same_set(std::string_view packed, const std::vector<WantedDevice>& wanted) {
  if (packed.size() != wanted.size() * kPackedDevice) return false;
  for (std::size_t i = 0; i < wanted.size(); ++i) {
    std::uint32_t fields[kFields];
    fields_of(wanted[i], fields);
    if (std::memcmp(packed.data() + i * kPackedDevice, fields, kPackedDevice) != 0) return false;
  }
  return true;
}

}  // namespace

std::string packed_device_set(const std::vector<WantedDevice>& wanted) {
  std::string packed;
  packed.reserve(wanted.size() * kPackedDevice);
  for (const auto& d : wanted) {
    std::uint32_t fields[kFields];
    fields_of(d, fields);
    packed.append(reinterpret_cast<const char*>(fields), kPackedDevice);
  }
  return packed;
}

std::vector<WantedDevice> unpacked_device_set(std::string_view packed) {
  std::vector<WantedDevice> wanted;
  for (std::size_t at = 0; at + kPackedDevice <= packed.size(); at += kPackedDevice) {
    std::uint32_t fields[kFields];
    std::memcpy(fields, packed.data() + at, kPackedDevice);
    WantedDevice d;
    d.dev = {static_cast<DeviceType>(fields[0]), fields[1], fields[2]};
    d.access = static_cast<std::uint8_t>(fields[3]);
    wanted.push_back(std::move(d));
  }
  return wanted;
}

void WantedDeviceSets::want(const std::string& dir, const std::vector<WantedDevice>& wanted) {
  const std::uint64_t key = std::hash<std::string>{}(dir);
  auto known = by_dir_.find(key);
  if (known != by_dir_.end()) {
    if (same_set(known->second->first, wanted)) return;
    release(known->second);
    by_dir_.erase(known);
  }
  if (wanted.empty()) return;
  auto& set = *sets_.try_emplace(packed_device_set(wanted), 0).first;
  ++set.second;
  by_dir_[key] = &set;
}

void WantedDeviceSets::forget(const std::string& dir) {
  auto known = by_dir_.find(std::hash<std::string>{}(dir));
  if (known == by_dir_.end()) return;
  release(known->second);
  by_dir_.erase(known);
}

void WantedDeviceSets::release(Sets::value_type* set) {
  if (--set->second == 0) sets_.erase(sets_.find(set->first));
}

std::vector<std::string> WantedDeviceSets::most_wanted(std::size_t max) const {
  std::vector<const Sets::value_type*> order;
  order.reserve(sets_.size());
  for (const auto& set : sets_) order.push_back(&set);
  // Most holders first; equal counts in byte order, so that the choice does not follow the
  // hash table's.
  std::sort(order.begin(), order.end(), [](const auto* a, const auto* b) {
    return a->second != b->second ? a->second > b->second : a->first < b->first;
  });
  std::vector<std::string> out;
  for (std::size_t i = 0; i < order.size() && i < max; ++i) out.push_back(order[i]->first);
  return out;
}

}  // namespace gdw
