// The container fleet's inotify queue (service/container_watches.h) on this machine's
// kernel, over plain files standing in for cgroup files: what a batch of writes and
// directory changes is sorted into, which the fleet acts on without looking again.
#include "service/container_watches.h"

#include "service/container_table.h"

#include <gtest/gtest.h>
#include <stdio.h>
#include <unistd.h>

#include <algorithm>

#include "metrics/metrics.h"
#include "support/temp_dir.h"

namespace gdw {
namespace {

class ContainerWatchesTest : public ::testing::Test {
 protected:
  void SetUp() override { ASSERT_TRUE(watches.start()); }

  // A GPU container whose cgroup directory holds the two v1 rule files.
  WatchedContainer& container(const std::string& rel, std::uint64_t id) {
    DiscoveredContainer cg;
    cg.cgroup_dir = tmp.mkdirs(rel);
    tmp.write(rel + "/devices.deny", "");
    tmp.write(rel + "/devices.allow", "");
    auto& w = table.upsert(cg, Config{}).first;
    table.set_cgroup_id(w, id);
    return w;
  }

  test::TempDir tmp;
  Metrics metrics;
  ContainerWatches watches{DaemonMetrics(metrics)};
  ContainerTable table;
};

TEST_F(ContainerWatchesTest, RuleWritesComeBackOncePerContainerByCgroupId) {
  WatchedContainer& a = container("pod1/a", 11);
  WatchedContainer& b = container("pod1/b", 22);
  watches.watch_rule_files(a, {"devices.deny"});
  watches.watch_rule_files(b, {"devices.deny"});
  for (int i = 0; i < 5; ++i) test::write_file(a.cgroup.cgroup_dir + "/devices.deny", "a");
  test::write_file(b.cgroup.cgroup_dir + "/devices.deny", "a");
  test::write_file(a.cgroup.cgroup_dir + "/devices.allow", "c 195:0 rw");  // not watched: cannot revoke

  ContainerEvents events = watches.read();
  EXPECT_EQ(events.rule_writes, (std::vector<std::uint64_t>{11, 22}));
  EXPECT_TRUE(events.only_rule_writes());
  EXPECT_TRUE(watches.read().rule_writes.empty()) << "a read takes the whole queue";
}

TEST_F(ContainerWatchesTest, RestoringFilesAreWatchedOnlyWhileDevicesAreMissing) {
  WatchedContainer& a = container("pod1/a", 11);
  watches.watch_restoring_files(a, {"devices.allow"});
  test::write_file(a.cgroup.cgroup_dir + "/devices.allow", "c 195:0 rw");
  EXPECT_TRUE(watches.read().rule_writes.empty()) << "nothing missing: not watched";

  a.repair.missing.insert(DeviceNumber{DeviceType::kChar, 195, 0});
  watches.watch_restoring_files(a, {"devices.allow"});
  test::write_file(a.cgroup.cgroup_dir + "/devices.allow", "c 195:0 rw");
  EXPECT_EQ(watches.read().rule_writes, std::vector<std::uint64_t>{11});

  a.repair.missing.clear();
  watches.watch_restoring_files(a, {"devices.allow"});
  EXPECT_TRUE(a.restoring_wds.empty());
  test::write_file(a.cgroup.cgroup_dir + "/devices.allow", "c 195:0 rw");
  EXPECT_TRUE(watches.read().rule_writes.empty()) << "whole again: the watch is gone";
}

TEST_F(ContainerWatchesTest, TreeChangesAndParentDeniesAreSortedApart) {
  const std::string pod = tmp.mkdirs("kubepods/pod1");
  tmp.write("kubepods/pod1/devices.deny", "");
  watches.watch_tree_dir(pod);
  tmp.mkdirs("kubepods/pod1/c1");
  test::write_file(pod + "/devices.deny", "a");
  ASSERT_EQ(::rmdir((pod + "/c1").c_str()), 0);

  ContainerEvents events = watches.read();
  EXPECT_FALSE(events.only_rule_writes());
  EXPECT_EQ(events.parent_denies, std::vector<std::string>{pod});
  ASSERT_EQ(events.tree.size(), 2u);
  EXPECT_EQ(events.tree[0].path, pod + "/c1");
  EXPECT_TRUE(events.tree[0].created);
  EXPECT_EQ(events.tree[1].path, pod + "/c1");
  EXPECT_FALSE(events.tree[1].created);
}

TEST_F(ContainerWatchesTest, AContainerUnwatchedIsHeardNoMore) {
  WatchedContainer& a = container("pod1/a", 11);
  watches.watch_rule_files(a, {"devices.deny"});
  watches.unwatch(a);
  EXPECT_TRUE(a.wds.empty());
  test::write_file(a.cgroup.cgroup_dir + "/devices.deny", "a");
  EXPECT_TRUE(watches.read().rule_writes.empty());
}

// A create's pid file: renamed into place (runc) or written there (crun); the watch of its
// directory hears both, named, and nothing once dropped.
TEST_F(ContainerWatchesTest, AWatchedCreateHearsItsPidFileRenamedOrWrittenUntilUnwatched) {
  WatchedContainer& a = container("pod1/a", 11);
  const std::string bundle = tmp.mkdirs("state/k8s.io/a");
  watches.watch_create(a, bundle + "/init.pid");
  ASSERT_GE(a.create_wd, 0);
  test::write_file(bundle + "/.init.pid", "42");
  ASSERT_EQ(::rename((bundle + "/.init.pid").c_str(), (bundle + "/init.pid").c_str()), 0);
  ContainerEvents events = watches.read();
  ASSERT_FALSE(events.create_files.empty());
  EXPECT_EQ(events.create_files.back().cgroup_dir, a.cgroup.cgroup_dir);
  EXPECT_EQ(events.create_files.back().name, "init.pid") << "the rename comes last";
  EXPECT_TRUE(events.rule_writes.empty());

  test::write_file(bundle + "/pidfile", "43");  // crun: written in place
  events = watches.read();
  ASSERT_EQ(events.create_files.size(), 1u);
  EXPECT_EQ(events.create_files[0].name, "pidfile");

  watches.unwatch_create(a);
  EXPECT_EQ(a.create_wd, -1);
  test::write_file(bundle + "/init.pid", "44");
  EXPECT_TRUE(watches.read().create_files.empty());
}

TEST_F(ContainerWatchesTest, ACreateWhoseDirectoryIsMissingIsNotWatched) {
  WatchedContainer& a = container("pod1/a", 11);
  watches.watch_create(a, tmp.path() + "/state/none/init.pid");
  EXPECT_EQ(a.create_wd, -1) << "the pid file is then looked for every 2 ms";
  watches.unwatch(a);  // no watch to drop
  EXPECT_EQ(a.create_wd, -1);
}

}  // namespace
}  // namespace gdw
