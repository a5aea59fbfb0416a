// The container table's cgroup-id index (service/container_table.h): the probe names a
// container only by its cgroup id, so every id must find its container, and only it,
// through adds, id changes and removals in any order.
#include <gtest/gtest.h>

#include <algorithm>
#include <random>
#include <string>
#include <vector>

#include "service/container_table.h"

namespace gdw {
namespace {

class ContainerTableIds : public ::testing::Test {
 protected:
  WatchedContainer& add(const std::string& dir) {
    DiscoveredContainer cg;
    cg.cgroup_dir = dir;
    return table.upsert(cg, config).first;
  }
  Config config;
  ContainerTable table;
};

TEST_F(ContainerTableIds, EveryIdFindsItsOwnContainerWhateverTheOrder) {
  std::mt19937_64 rng(7);
  std::vector<std::pair<std::string, std::uint64_t>> added;
  for (int i = 0; i < 500; ++i) {
    const std::string dir = "/c/" + std::to_string(i);
    const std::uint64_t id = rng() % 100000 + 1;
    if (table.by_cgroup_id(id)) continue;  // ids are unique in the kernel
    table.set_cgroup_id(add(dir), id);
    added.emplace_back(dir, id);
  }
  ASSERT_GT(added.size(), 490u);
  for (const auto& [dir, id] : added) {
    ASSERT_NE(table.by_cgroup_id(id), nullptr) << id;
    EXPECT_EQ(table.by_cgroup_id(id)->cgroup.cgroup_dir, dir);
  }
  EXPECT_EQ(table.by_cgroup_id(0), nullptr);
  EXPECT_EQ(table.by_cgroup_id(100001), nullptr);

  std::shuffle(added.begin(), added.end(), rng);
  for (std::size_t i = 0; i < added.size() / 2; ++i) table.erase(added[i].first);
  for (std::size_t i = 0; i < added.size(); ++i) {
    WatchedContainer* w = table.by_cgroup_id(added[i].second);
    if (i < added.size() / 2) {
      EXPECT_EQ(w, nullptr) << "a removed container is not found by its old id";
    } else {
      ASSERT_NE(w, nullptr);
      EXPECT_EQ(w->cgroup.cgroup_dir, added[i].first);
    }
  }
}

TEST_F(ContainerTableIds, ANewIdReplacesTheOldOneAndSettingItAgainChangesNothing) {
  WatchedContainer& a = add("/c/a");
  WatchedContainer& b = add("/c/b");
  table.set_cgroup_id(a, 10);
  table.set_cgroup_id(b, 20);
  table.set_cgroup_id(a, 30);  // re-created cgroup at the same path
  EXPECT_EQ(table.by_cgroup_id(10), nullptr);
  EXPECT_EQ(table.by_cgroup_id(30), &a);
  table.set_cgroup_id(a, 30);
  EXPECT_EQ(table.by_cgroup_id(30), &a);
  EXPECT_EQ(table.by_cgroup_id(20), &b);
  table.set_cgroup_id(b, 0);  // unknown again
  EXPECT_EQ(table.by_cgroup_id(20), nullptr);
  EXPECT_EQ(b.cgroup_id, 0u);
  table.clear();
  EXPECT_EQ(table.by_cgroup_id(30), nullptr);
}

}  // namespace
}  // namespace gdw
