// /proc/cgroups: the devices controller's v1 hierarchy id, which the daemon matches against
// the probe's cgroup_mkdir events; read under devices.proc_root.
#include "runtime/proc_cgroups.h"

#include <gtest/gtest.h>

#include "support/temp_dir.h"

namespace gdw {
namespace {

const std::string kFixtures = GDW_TEST_FIXTURES;

TEST(ProcCgroups, ParsesEveryControllerLineAndSkipsTheHeader) {
  auto entries = parse_proc_cgroups(
      "#subsys_name\thierarchy\tnum_cgroups\tenabled\ncpuset\t3\t1\t1\ndevices\t5\t12\t1\nrdma\t0\t40\t0\n");
  ASSERT_TRUE(entries) << entries.error().message;
  ASSERT_EQ(entries->size(), 3u);
  EXPECT_EQ((*entries)[1].controller, "devices");
  EXPECT_EQ((*entries)[1].hierarchy, 5u);
  EXPECT_EQ((*entries)[1].cgroups, 12u);
  EXPECT_TRUE((*entries)[1].enabled);
  EXPECT_FALSE((*entries)[2].enabled);
}

TEST(ProcCgroups, AcceptsSpacesAndNoFinalNewlineOrHeader) {
  auto entries = parse_proc_cgroups("devices  7 1 1");
  ASSERT_TRUE(entries) << entries.error().message;
  auto id = v1_hierarchy_id(*entries, "devices");
  ASSERT_TRUE(id) << id.error().message;
  EXPECT_EQ(*id, 7u);
}

TEST(ProcCgroups, MalformedLinesAreErrorsNamingTheLine) {
  for (const char* bad : {"devices 5 1\n", "devices five 1 1\n", "devices 5 1 1 extra\n", "devices -5 1 1\n",
                          "devices 5 1 2\n", "devices 99999999999 1 1\n"}) {
    auto entries = parse_proc_cgroups(bad);
    ASSERT_FALSE(entries) << bad;
    EXPECT_NE(entries.error().message.find("malformed line 'devices"), std::string::npos) << entries.error().message;
  }
}

TEST(ProcCgroups, HierarchyIdOnlyForAnEnabledV1Controller) {
  auto entries = parse_proc_cgroups("memory\t4\t1\t1\ndevices\t0\t30\t1\nfreezer\t6\t1\t0\n");
  ASSERT_TRUE(entries);
  auto on_v2 = v1_hierarchy_id(*entries, "devices");
  ASSERT_FALSE(on_v2);
  EXPECT_EQ(on_v2.error().message, "the devices controller is on no cgroup v1 hierarchy");
  auto disabled = v1_hierarchy_id(*entries, "freezer");
  ASSERT_FALSE(disabled);
  EXPECT_EQ(disabled.error().message, "the freezer controller is disabled");
  auto absent = v1_hierarchy_id(*entries, "pids");
  ASSERT_FALSE(absent);
  EXPECT_EQ(absent.error().message, "no pids controller listed");
  EXPECT_EQ(*v1_hierarchy_id(*entries, "memory"), 4u);
}

TEST(ProcCgroups, ReadsTheFileUnderTheConfiguredProcRoot) {
  auto hybrid = read_v1_hierarchy_id(kFixtures + "/proc-cgroups-hybrid", "devices");
  ASSERT_TRUE(hybrid) << hybrid.error().message;
  EXPECT_EQ(*hybrid, 5u);

  auto v2_only = read_v1_hierarchy_id(kFixtures + "/proc-cgroups-v2", "devices");
  ASSERT_FALSE(v2_only);
  EXPECT_EQ(v2_only.error().message,
            kFixtures + "/proc-cgroups-v2/cgroups: the devices controller is on no cgroup v1 hierarchy");
}

TEST(ProcCgroups, ReadErrorsNameThePath) {
  test::TempDir dir;
  auto missing = read_v1_hierarchy_id(dir.path(), "devices");
  ASSERT_FALSE(missing);
  EXPECT_EQ(missing.error().message, dir.path() + "/cgroups: No such file or directory");

  dir.write("cgroups", "devices 5 1\n");
  auto malformed = read_v1_hierarchy_id(dir.path(), "devices");
  ASSERT_FALSE(malformed);
  EXPECT_EQ(malformed.error().message, dir.path() + "/cgroups: malformed line 'devices 5 1'");

  dir.write("cgroups", std::string(70 * 1024, '#'));
  auto huge = read_v1_hierarchy_id(dir.path(), "devices");
  ASSERT_FALSE(huge);
  EXPECT_NE(huge.error().message.find("larger than"), std::string::npos) << huge.error().message;
}

}  // namespace
}  // namespace gdw
