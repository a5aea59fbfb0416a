// What every resync reads again: the kubepods tree (scan_kubepods) and the runtimes' state
// directories (BundleIndex::refresh). Both are walked with descriptors relative to their
// parent (runtime/dir_entries.h); these pin what they find and what they skip.
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <thread>

#include "runtime/bundles.h"
#include "runtime/discovery.h"
#include "support/temp_dir.h"

namespace gdw {
namespace {

const std::string kUid1 = "11111111-2222-3333-4444-555555555555";
const std::string kUid2 = "aaaaaaaa-bbbb-cccc-dddd-eeeeeeeeeeee";
const std::string kId1(64, 'a');
const std::string kId2(64, 'b');
const std::string kId3(64, 'c');

std::vector<std::string> sorted(std::vector<std::string> v) {
  std::sort(v.begin(), v.end());
  return v;
}

TEST(ScanKubepods, FindsContainersUnderQosAndGuaranteedPodsAndNothingElse) {
  test::TempDir dir{"gdw-scan"};
  const std::string root = dir / "kubepods";
  dir.mkdirs("kubepods/besteffort/pod" + kUid1 + "/" + kId1);
  dir.mkdirs("kubepods/besteffort/pod" + kUid1 + "/" + kId2);
  dir.mkdirs("kubepods/pod" + kUid2 + "/" + kId3);
  dir.mkdirs("kubepods/pod" + kUid2 + "/not-a-container");
  dir.write("kubepods/pod" + kUid2 + "/" + std::string(64, 'd'), "a file, not a cgroup");
  dir.mkdirs("kubepods/unrelated/pod" + kUid1 + "/" + kId1);
  // A symlink where a pod's directory would be: never followed.
  dir.mkdirs("elsewhere/" + kId2);
  ASSERT_EQ(::symlink((dir / "elsewhere").c_str(), (root + "/burstable").c_str()), 0);

  KubepodsTree tree = scan_kubepods(KubepodsLocation{dir.path(), "kubepods"});
  std::vector<std::string> containers;
  for (const auto& c : tree.containers) containers.push_back(c.cgroup_dir);
  const std::string be_pod = root + "/besteffort/pod" + kUid1;
  const std::string g_pod = root + "/pod" + kUid2;
  EXPECT_EQ(sorted(containers), sorted({be_pod + "/" + kId1, be_pod + "/" + kId2, g_pod + "/" + kId3}));
  EXPECT_EQ(sorted(tree.parent_dirs), sorted({root + "/besteffort", be_pod, g_pod}));
  for (const auto& c : tree.containers) {
    const bool best_effort = c.pod_dir == be_pod;
    EXPECT_EQ(c.qos, best_effort ? QosClass::kBestEffort : QosClass::kGuaranteed) << c.cgroup_dir;
    EXPECT_EQ(c.pod.pod_uid, best_effort ? kUid1 : kUid2);
    EXPECT_EQ(c.cgroup_dir, c.pod_dir + "/" + c.leaf.container_id);
  }
}

TEST(ScanKubepods, AManyPodTreeIsReadWhole) {
  // More entries than one getdents64 buffer holds, at every level.
  test::TempDir dir{"gdw-scan-many"};
  for (int i = 0; i < 300; ++i) {
    char uid[37];
    std::snprintf(uid, sizeof uid, "%08d-2222-3333-4444-555555555555", i);
    dir.mkdirs("kubepods/besteffort/pod" + std::string(uid) + "/" + kId1);
  }
  KubepodsTree tree = scan_kubepods(KubepodsLocation{dir.path(), "kubepods"});
  EXPECT_EQ(tree.containers.size(), 300u);
  EXPECT_EQ(tree.parent_dirs.size(), 301u);
}

TEST(ScanKubepods, AMissingRootIsAnEmptyTree) {
  test::TempDir dir{"gdw-scan-none"};
  KubepodsTree tree = scan_kubepods(KubepodsLocation{dir.path(), "kubepods"});
  EXPECT_TRUE(tree.containers.empty());
  EXPECT_TRUE(tree.parent_dirs.empty());
}

class BundleRefresh : public ::testing::Test {
 protected:
  void write_bundle(const std::string& rel, const std::string& hostname) {
    dir_.write(rel, R"({"ociVersion":"1.0.2","hostname":")" + hostname + R"(","linux":{"resources":{"devices":[]}}})");
  }
  test::TempDir dir_{"gdw-bundles"};
};

TEST_F(BundleRefresh, ReparsesOnlyWhatChangedAndDropsWhatIsGone) {
  write_bundle("containerd/" + kId1 + "/config.json", "one");
  write_bundle("crio/" + kId2 + "/userdata/config.json", "two");
  dir_.mkdirs("containerd/" + kId3);  // a task directory without its config.json yet
  BundleIndex index({dir_ / "containerd", dir_ / "crio"});
  index.refresh();
  ASSERT_EQ(index.size(), 2u);
  ASSERT_NE(index.find(kId1), nullptr);
  ASSERT_NE(index.find(kId2), nullptr);
  EXPECT_EQ(index.find(kId1)->config_path, dir_ / "containerd" + "/" + kId1 + "/config.json");
  EXPECT_EQ(index.find(kId2)->config_path, dir_ / "crio" + "/" + kId2 + "/userdata/config.json");
  EXPECT_EQ(index.find(kId3), nullptr);

  const auto g = index.generation();
  index.refresh();
  EXPECT_EQ(index.generation(), g) << "nothing changed, nothing parsed again";
  EXPECT_EQ(index.size(), 2u);

  // Rewritten (a new inode by rename, as runtimes do) and a late config.json: both read.
  write_bundle("tmp.json", "one-again");
  ASSERT_EQ(::rename((dir_ / "tmp.json").c_str(), (dir_ / "containerd" + "/" + kId1 + "/config.json").c_str()), 0);
  write_bundle("containerd/" + kId3 + "/config.json", "three");
  index.refresh();
  EXPECT_GT(index.generation(), g);
  EXPECT_EQ(index.size(), 3u);
  ASSERT_NE(index.find(kId3), nullptr);

  // A bundle removed: dropped at the next refresh.
  ASSERT_EQ(::unlink((dir_ / "crio" + "/" + kId2 + "/userdata/config.json").c_str()), 0);
  const auto g2 = index.generation();
  index.refresh();
  EXPECT_EQ(index.find(kId2), nullptr);
  EXPECT_EQ(index.size(), 2u);
  EXPECT_GT(index.generation(), g2);
}

TEST_F(BundleRefresh, FindOrLoadReadsABundleBeforeTheNextRefreshAndRefreshKeepsIt) {
  BundleIndex index({dir_ / "containerd"});
  index.refresh();
  write_bundle("containerd/" + kId1 + "/config.json", "one");
  const Bundle* b = index.find_or_load(kId1);
  ASSERT_NE(b, nullptr);
  EXPECT_EQ(b->config_path, dir_ / "containerd" + "/" + kId1 + "/config.json");
  const auto g = index.generation();
  index.refresh();
  EXPECT_NE(index.find(kId1), nullptr);
  EXPECT_EQ(index.generation(), g) << "loaded once, unchanged since";
}

TEST_F(BundleRefresh, AnUnparsableBundleIsAProblemUntilItIsFixed) {
  dir_.write("containerd/" + kId1 + "/config.json", "{not json");
  BundleIndex index({dir_ / "containerd"});
  index.refresh();
  EXPECT_EQ(index.find(kId1), nullptr);
  EXPECT_EQ(index.problems().count(dir_ / "containerd" + "/" + kId1 + "/config.json"), 1u);
  write_bundle("tmp.json", "fixed");
  ASSERT_EQ(::rename((dir_ / "tmp.json").c_str(), (dir_ / "containerd" + "/" + kId1 + "/config.json").c_str()), 0);
  index.refresh();
  EXPECT_NE(index.find(kId1), nullptr);
  EXPECT_TRUE(index.problems().empty());
}

}  // namespace
}  // namespace gdw
