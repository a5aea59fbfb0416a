// KubepodsScanner (runtime/kubepods_scan.h) on real cgroup v1 devices cgroups: the QoS and
// pod directories it keeps open between scans always show the tree as it is now — new
// and removed containers, a pod removed and made again under the same name — and it keeps
// nothing on other filesystems.
#include "runtime/kubepods_scan.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <optional>

#include "support/cgroup_sandbox.h"
#include "support/temp_dir.h"

namespace gdw {
namespace {

using test::CgroupSandbox;

const std::string kUid1 = "11111111-2222-3333-4444-555555555555";
const std::string kUid2 = "aaaaaaaa-bbbb-cccc-dddd-eeeeeeeeeeee";
const std::string kId1(64, 'a');
const std::string kId2(64, 'b');
const std::string kId3(64, 'c');
const std::string kId4(64, 'd');

std::vector<std::string> container_ids(const KubepodsTree& tree) {
  std::vector<std::string> ids;
  for (const auto& c : tree.containers) ids.push_back(c.leaf.container_id);
  std::sort(ids.begin(), ids.end());
  return ids;
}

class KubepodsScannerTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!CgroupSandbox::available("devices")) GTEST_SKIP() << "needs root and the v1 devices hierarchy";
    sandbox_.emplace("devices", "scan");
    sandbox_->make(pod1_ + "/" + kId1);
    sandbox_->make(pod2_ + "/" + kId2);
    where_ = KubepodsLocation{sandbox_->path(), "kubepods"};
  }
  // What the scanner saw, checked against a fresh one-off walk of the same tree.
  std::vector<std::string> scan(KubepodsScanner& scanner) {
    KubepodsTree tree = scanner.scan(where_);
    KubepodsTree fresh = scan_kubepods(where_);
    EXPECT_EQ(container_ids(tree), container_ids(fresh));
    EXPECT_EQ(tree.parent_dirs.size(), fresh.parent_dirs.size());
    return container_ids(tree);
  }

  const std::string pod1_ = "kubepods/besteffort/pod" + kUid1;
  const std::string pod2_ = "kubepods/pod" + kUid2;
  std::optional<CgroupSandbox> sandbox_;
  KubepodsLocation where_;
};

TEST_F(KubepodsScannerTest, KeptDirectoriesShowContainersThatCameAndWent) {
  KubepodsScanner scanner(64);
  EXPECT_EQ(scan(scanner), (std::vector<std::string>{kId1, kId2}));
  EXPECT_EQ(scanner.kept(), 3u) << "besteffort and both pods";

  sandbox_->make(pod2_ + "/" + kId3);
  EXPECT_EQ(scan(scanner), (std::vector<std::string>{kId1, kId2, kId3}));
  sandbox_->remove(pod1_ + "/" + kId1);
  EXPECT_EQ(scan(scanner), (std::vector<std::string>{kId2, kId3}));
  EXPECT_EQ(scanner.kept(), 3u);
}

TEST_F(KubepodsScannerTest, APodMadeAgainUnderTheSameNameIsReadAfresh) {
  KubepodsScanner scanner(64);
  EXPECT_EQ(scan(scanner), (std::vector<std::string>{kId1, kId2}));
  // The kept descriptor is the removed directory's: it would list nothing.
  sandbox_->remove(pod2_);
  sandbox_->make(pod2_ + "/" + kId4);
  EXPECT_EQ(scan(scanner), (std::vector<std::string>{kId1, kId4}));
  EXPECT_EQ(scanner.kept(), 3u) << "the removed pod's descriptor is closed, the new one's kept";
}

TEST_F(KubepodsScannerTest, AGonePodsDescriptorIsClosed) {
  KubepodsScanner scanner(64);
  scan(scanner);
  ASSERT_EQ(scanner.kept(), 3u);
  sandbox_->remove(pod1_);
  EXPECT_EQ(scan(scanner), (std::vector<std::string>{kId2}));
  EXPECT_EQ(scanner.kept(), 2u);
  sandbox_->remove("kubepods/besteffort");
  scan(scanner);
  EXPECT_EQ(scanner.kept(), 1u);
}

TEST_F(KubepodsScannerTest, ARemovedDirectorysDescriptorIsClosedWithoutWaitingForAScan) {
  KubepodsScanner scanner(64);
  scan(scanner);
  ASSERT_EQ(scanner.kept(), 3u);
  sandbox_->remove(pod1_);
  scanner.forget(sandbox_->path() + "/" + pod1_);
  EXPECT_EQ(scanner.kept(), 2u) << "the removed pod's descriptor is closed at once";
  scanner.forget(sandbox_->path() + "/kubepods/pod");  // a prefix, not a directory above
  EXPECT_EQ(scanner.kept(), 2u);
  scanner.forget(sandbox_->path() + "/kubepods/besteffort");  // the QoS dir and all below
  EXPECT_EQ(scanner.kept(), 1u);
  EXPECT_EQ(scan(scanner), (std::vector<std::string>{kId2}));
}

TEST_F(KubepodsScannerTest, BeyondItsLimitDirectoriesAreOpenedEachTime) {
  KubepodsScanner scanner(1);
  for (int i = 0; i < 3; ++i) {
    EXPECT_EQ(scan(scanner), (std::vector<std::string>{kId1, kId2}));
    EXPECT_EQ(scanner.kept(), 1u);
  }
  KubepodsScanner none(0);
  EXPECT_EQ(scan(none), (std::vector<std::string>{kId1, kId2}));
  EXPECT_EQ(none.kept(), 0u);
}

TEST(KubepodsScannerPlain, NothingIsKeptOutsideCgroupfs) {
  // Inode numbers are reused on ordinary filesystems: a kept descriptor could not be told
  // from a directory made again.
  test::TempDir dir{"gdw-scan-plain"};
  dir.mkdirs("kubepods/pod" + kUid2 + "/" + kId2);
  KubepodsScanner scanner(64);
  const KubepodsLocation where{dir.path(), "kubepods"};
  EXPECT_EQ(container_ids(scanner.scan(where)), (std::vector<std::string>{kId2}));
  EXPECT_EQ(scanner.kept(), 0u);
  test::remove_tree(dir / "kubepods/pod" + kUid2);
  dir.mkdirs("kubepods/pod" + kUid2 + "/" + kId3);
  EXPECT_EQ(container_ids(scanner.scan(where)), (std::vector<std::string>{kId3}));
}

}  // namespace
}  // namespace gdw
