// BundleIndex::refresh(kChangedListings), what the periodic resync runs: a state directory
// whose listing did not change is not walked again, yet what a resync exists to catch
// (a new or removed bundle, a config.json written late) is still caught; only a rewrite in
// place of a running container's config.json waits for a full refresh (startup, SIGHUP,
// inotify overflow).
#include <gtest/gtest.h>
#include <unistd.h>

#include <chrono>
#include <thread>

#include "runtime/bundles.h"
#include "support/temp_dir.h"

namespace gdw {
namespace {

const std::string kId1(64, 'a');
const std::string kId2(64, 'b');
const std::string kId3(64, 'c');

class PeriodicBundleRefresh : public ::testing::Test {
 protected:
  // `tag` is what tells one version of a bundle from another (as linux.cgroupsPath).
  void write_bundle(const std::string& rel, const std::string& tag) {
    dir_.write(rel, R"({"ociVersion":"1.0.2","linux":{"cgroupsPath":")" + tag + R"(","resources":{"devices":[]}}})");
  }
  // A directory's stamp is trusted only once its last change is older than the filesystem's
  // timestamp tick (bundles.cpp): let it settle, then list it.
  void settle_and_list(BundleIndex& index) {
    std::this_thread::sleep_for(std::chrono::milliseconds(150));
    index.refresh(BundleRefreshDepth::kEveryStamp);
  }
  std::string tag_of(const BundleIndex& index, const std::string& id) {
    const Bundle* b = index.find(id);
    return b ? b->info.cgroups_path : "<none>";
  }
  test::TempDir dir_{"gdw-bundle-depth"};
};

TEST_F(PeriodicBundleRefresh, AnUnchangedListingIsNotWalkedAgain) {
  write_bundle("containerd/" + kId1 + "/config.json", "one");
  write_bundle("crio/" + kId2 + "/userdata/config.json", "two");
  BundleIndex index({dir_ / "containerd", dir_ / "crio"});
  settle_and_list(index);
  EXPECT_EQ(index.last_listed_dirs(), 2u);
  const auto g = index.generation();

  index.refresh(BundleRefreshDepth::kChangedListings);
  EXPECT_EQ(index.last_listed_dirs(), 0u) << "neither listing changed";
  EXPECT_EQ(index.generation(), g);
  EXPECT_EQ(index.size(), 2u) << "nothing dropped by a refresh that listed nothing";
  index.refresh(BundleRefreshDepth::kEveryStamp);
  EXPECT_EQ(index.last_listed_dirs(), 2u) << "a full refresh always lists";
}

TEST_F(PeriodicBundleRefresh, ANewOrRemovedBundleIsCaughtWithoutAnyEvent) {
  write_bundle("containerd/" + kId1 + "/config.json", "one");
  write_bundle("containerd/" + kId2 + "/config.json", "two");
  BundleIndex index({dir_ / "containerd"});
  settle_and_list(index);

  write_bundle("containerd/" + kId3 + "/config.json", "three");
  index.refresh(BundleRefreshDepth::kChangedListings);
  EXPECT_EQ(index.last_listed_dirs(), 1u);
  EXPECT_EQ(tag_of(index, kId3), "three");

  test::remove_tree(dir_ / "containerd/" + kId2);
  index.refresh(BundleRefreshDepth::kChangedListings);
  EXPECT_EQ(index.find(kId2), nullptr);
  EXPECT_EQ(tag_of(index, kId1), "one");
  EXPECT_EQ(index.size(), 2u);
}

TEST_F(PeriodicBundleRefresh, AConfigWrittenLateIsReadWhileTheListingStaysTheSame) {
  write_bundle("containerd/" + kId1 + "/config.json", "one");
  dir_.mkdirs("containerd/" + kId2);  // a task directory, its config.json not written yet
  BundleIndex index({dir_ / "containerd"});
  settle_and_list(index);
  ASSERT_EQ(index.find(kId2), nullptr);
  index.refresh(BundleRefreshDepth::kChangedListings);
  ASSERT_EQ(index.last_listed_dirs(), 0u);

  write_bundle("containerd/" + kId2 + "/config.json", "late");
  const auto g = index.generation();
  index.refresh(BundleRefreshDepth::kChangedListings);
  EXPECT_EQ(index.last_listed_dirs(), 0u) << "the state directory's own listing did not change";
  EXPECT_EQ(tag_of(index, kId2), "late");
  EXPECT_GT(index.generation(), g);
}

TEST_F(PeriodicBundleRefresh, ARewriteInPlaceWaitsForAFullRefresh) {
  write_bundle("containerd/" + kId1 + "/config.json", "one");
  BundleIndex index({dir_ / "containerd"});
  settle_and_list(index);

  // Runtimes never do this to a running container; an operator's SIGHUP reads it.
  write_bundle("containerd/" + kId1 + "/config.json", "rewritten");
  index.refresh(BundleRefreshDepth::kChangedListings);
  EXPECT_EQ(tag_of(index, kId1), "one");
  index.refresh(BundleRefreshDepth::kEveryStamp);
  EXPECT_EQ(tag_of(index, kId1), "rewritten");
}

TEST_F(PeriodicBundleRefresh, AListingChangedJustBeforeItWasReadIsReadAgain) {
  write_bundle("containerd/" + kId1 + "/config.json", "one");
  BundleIndex index({dir_ / "containerd"});
  index.refresh(BundleRefreshDepth::kEveryStamp);  // the directory changed a moment ago
  index.refresh(BundleRefreshDepth::kChangedListings);
  EXPECT_EQ(index.last_listed_dirs(), 1u) << "a change within the same timestamp tick could hide behind its stamp";
}

TEST_F(PeriodicBundleRefresh, AStateDirectoryThatAppearsLaterIsListed) {
  BundleIndex index({dir_ / "containerd"});
  index.refresh(BundleRefreshDepth::kChangedListings);
  EXPECT_EQ(index.size(), 0u);
  write_bundle("containerd/" + kId1 + "/config.json", "one");
  index.refresh(BundleRefreshDepth::kChangedListings);
  EXPECT_EQ(tag_of(index, kId1), "one");
}

}  // namespace
}  // namespace gdw
