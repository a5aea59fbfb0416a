// The device sets the GPU containers of a cgroup v2 node want (backend/wanted_device_sets.h):
// which wrappers the daemon loads ahead of repairs. Each set counted once however many
// containers want it, a container counted once however often it is looked at, and a set
// no container wants any more gone.
#include "backend/wanted_device_sets.h"

#include <gtest/gtest.h>

#include <map>
#include <random>

namespace gdw {
namespace {

WantedDevice device(std::uint32_t major, std::uint32_t minor, std::uint8_t access = kAccessReadWrite) {
  return WantedDevice{{DeviceType::kChar, major, minor}, access, "nvidia" + std::to_string(minor), "GPU-x"};
}

// A GPU container's set: its GPU and the control nodes.
std::vector<WantedDevice> gpu_set(std::uint32_t gpu) {
  return {device(195, gpu), device(195, 255), device(508, 0, kAccessAll)};
}

TEST(WantedDeviceSets, PackedSetsKeepWhatAWrapperAddsAndNothingElse) {
  const auto set = gpu_set(3);
  const auto back = unpacked_device_set(packed_device_set(set));
  ASSERT_EQ(back.size(), set.size());
  for (std::size_t i = 0; i < set.size(); ++i) {
    EXPECT_EQ(back[i].dev, set[i].dev);
    EXPECT_EQ(back[i].access, set[i].access);
    EXPECT_TRUE(back[i].name.empty()) << "a wrapper's code has no use for names";
  }
  // Numbers that are '|' or NUL as bytes survive (the wrapper cache's key separator).
  const std::vector<WantedDevice> odd{device('|', 0), device(0, '|' << 8), {{DeviceType::kBlock, 7, 0}, kAccessRead}};
  const auto odd_back = unpacked_device_set(packed_device_set(odd));
  ASSERT_EQ(odd_back.size(), 3u);
  EXPECT_EQ(odd_back[1].dev.minor, std::uint32_t('|') << 8);
  EXPECT_EQ(odd_back[2].dev.type, DeviceType::kBlock);
  EXPECT_EQ(odd_back[2].access, kAccessRead);
  EXPECT_NE(packed_device_set(gpu_set(1)), packed_device_set(gpu_set(2)));
  auto read_only = gpu_set(1);
  read_only[0].access = kAccessRead;
  EXPECT_NE(packed_device_set(read_only), packed_device_set(gpu_set(1))) << "the access is part of the set";
}

TEST(WantedDeviceSets, EachSetOnceMostWantedFirstAndGoneWithItsLastContainer) {
  WantedDeviceSets sets;
  sets.want("/kubepods/a", gpu_set(0));
  sets.want("/kubepods/b", gpu_set(1));
  sets.want("/kubepods/c", gpu_set(1));
  sets.want("/kubepods/c", gpu_set(1));  // looked at again: still one container
  sets.want("/kubepods/plain", {});     // no devices: no set
  ASSERT_EQ(sets.size(), 2u);
  auto order = sets.most_wanted(8);
  ASSERT_EQ(order.size(), 2u);
  EXPECT_EQ(order[0], packed_device_set(gpu_set(1))) << "two containers want it";
  EXPECT_EQ(order[1], packed_device_set(gpu_set(0)));
  EXPECT_EQ(sets.most_wanted(1).size(), 1u) << "at most `max`";

  sets.forget("/kubepods/b");
  EXPECT_EQ(sets.most_wanted(8)[0], packed_device_set(gpu_set(0))) << "ties in byte order, gpu 0 first";
  sets.want("/kubepods/c", gpu_set(2));  // its allocation changed
  ASSERT_EQ(sets.size(), 2u) << "gpu 1's last container moved to gpu 2";
  EXPECT_EQ(sets.most_wanted(8), (std::vector{packed_device_set(gpu_set(0)), packed_device_set(gpu_set(2))}));
  sets.want("/kubepods/a", {});  // lost its allocation
  sets.forget("/kubepods/c");
  sets.forget("/kubepods/never-seen");
  EXPECT_EQ(sets.size(), 0u);
  EXPECT_TRUE(sets.most_wanted(8).empty());
}

// Against a plain map of container → set: after any sequence of looks and departures,
// the sets and their order are those of the containers still there.
TEST(WantedDeviceSets, AnySequenceLeavesTheSetsOfTheContainersThere) {
  WantedDeviceSets sets;
  std::map<std::string, std::uint32_t> reference;  // dir → gpu, or absent
  std::mt19937 rng(7);
  for (int step = 0; step < 5000; ++step) {
    const std::string dir = "/kubepods/c" + std::to_string(rng() % 40);
    const auto gpu = static_cast<std::uint32_t>(rng() % 6);
    switch (rng() % 4) {
      case 0:
      case 1:
        sets.want(dir, gpu_set(gpu));
        reference[dir] = gpu;
        break;
      case 2:
        sets.want(dir, {});
        reference.erase(dir);
        break;
      default:
        sets.forget(dir);
        reference.erase(dir);
    }
    std::map<std::uint32_t, std::size_t> holders;
    for (const auto& [d, g] : reference) ++holders[g];
    ASSERT_EQ(sets.size(), holders.size()) << "step " << step;
    std::vector<std::pair<std::size_t, std::string>> expected;
    for (const auto& [g, n] : holders) expected.emplace_back(n, packed_device_set(gpu_set(g)));
    std::sort(expected.begin(), expected.end(),
              [](const auto& a, const auto& b) { return a.first != b.first ? a.first > b.first : a.second < b.second; });
    const auto order = sets.most_wanted(expected.size());
    for (std::size_t i = 0; i < expected.size(); ++i) ASSERT_EQ(order[i], expected[i].second) << "step " << step;
  }
}

}  // namespace
}  // namespace gdw
