// Issue 39, part 4: a swap that cannot race. On a kernel that keeps revisions of a cgroup's
// device programs (Linux 6.17+), a repair's swap carries the revision of the query it was
// decided on; another manager's attach between that query and the swap makes the kernel
// refuse it (ESTALE), and the repair looks again at once and succeeds, with the refusal
// counted. Without revisions (an older kernel, or RevisionCheck::kNever here) the swap
// names the program it replaces, as before. The foreign attach lands between the daemon's
// look (observe, or a snapshot) and its grant, the two steps of every repair.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <linux/bpf.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <memory>

#include "backend/device_access.h"
#include "backend/device_program_cache.h"
#include "backend/device_programs_v2.h"
#include "support/cgroup_sandbox.h"
#include "support/foreign_device_program.h"
#include "support/temp_dir.h"

namespace gdw::test {
namespace {

const OciDeviceCgroupRule kDenyAll{false, DeviceRule{DeviceType::kAll, kAnyNumber, kAnyNumber, kAccessAll}};
const OciDeviceCgroupRule kAllowAll{true, DeviceRule{DeviceType::kAll, kAnyNumber, kAnyNumber, kAccessAll}};
constexpr const char* kNoRevisions =
    "this kernel keeps no revisions of a cgroup's programs (Linux 6.17+; Debian's 6.12.117 has them, its 6.1 not)";
// The runtime's spec: deny everything but /dev/null.
const std::vector<OciDeviceCgroupRule> kSpec{kDenyAll, {true, DeviceRule{DeviceType::kChar, 1, 3, kAccessAll}}};

class V2RevisionSwap : public ::testing::Test {
 protected:
  void SetUp() override {
    if (auto why = v2_device_programs_unavailable(); !why.empty()) GTEST_SKIP() << why;
    sandbox_ = std::make_unique<CgroupSandbox>("unified", "rev");
    dir_ = sandbox_->make("ctr");
    sandbox_->add_sleeper("ctr");
    const std::string node = nodes_ / "nvidia0";
    ASSERT_EQ(::mknod(node.c_str(), S_IFCHR | 0666, makedev(195, 0)), 0) << std::strerror(errno);
    runtime_ = std::make_unique<ForeignProgram>("", kSpec);
    ASSERT_EQ(runtime_->attach(dir_), 0);
    ASSERT_EQ(open_gpu(), EPERM);
  }

  int open_gpu() { return sandbox_->open_errno("ctr", nodes_ / "nvidia0"); }
  // Another manager's attach (a program that allows everything: it changes no verdict, only
  // the cgroup's revision).
  void foreign_attach() {
    foreign_.push_back(std::make_unique<ForeignProgram>("other", std::vector<OciDeviceCgroupRule>{kAllowAll}));
    ASSERT_EQ(foreign_.back()->attach(dir_), 0);
  }
  std::uint64_t revision() {
    auto r = device_programs_revision(dir_);
    EXPECT_TRUE(r.ok()) << r.error().message;
    return r.ok() ? *r : 0;
  }

  const std::vector<WantedDevice> wanted_{{{DeviceType::kChar, 195, 0}, kAccessReadWrite, "nvidia0", "test"}};
  TempDir nodes_{"gdw-rev-nodes"};
  std::unique_ptr<CgroupSandbox> sandbox_;
  std::string dir_;
  std::unique_ptr<ForeignProgram> runtime_;
  std::vector<std::unique_ptr<ForeignProgram>> foreign_;
};

TEST_F(V2RevisionSwap, AnAttachBetweenTheLookAndTheSwapIsRefusedAndTheRepairLooksAgainAtOnce) {
  const std::uint64_t before = revision();
  if (before == 0) GTEST_SKIP() << kNoRevisions;
  DeviceProgramCache cache;
  auto look = snapshot_device_programs(dir_, cache);
  ASSERT_TRUE(look.ok()) << look.error().message;
  ASSERT_EQ(look->cgroups.size(), 1u);
  EXPECT_EQ(look->cgroups[0].revision, before) << "the look reads the revision with the program ids";

  foreign_attach();  // after the look, before the swap
  EXPECT_EQ(revision(), before + 1);

  auto repair = repair_device_programs(dir_, wanted_, cache, &*look);
  ASSERT_TRUE(repair.ok()) << repair.error().message;
  EXPECT_EQ(repair->stale, 1u) << "the swap decided on the look was refused as stale";
  ASSERT_EQ(repair->replaced.size(), 1u) << "then decided again on a fresh query, and done";
  EXPECT_EQ(repair->replaced[0].old_id, runtime_->id);
  EXPECT_GE(repair->checked, 2u) << "both swaps carried a revision";
  EXPECT_TRUE(repair->still_denied.empty());
  EXPECT_EQ(open_gpu(), ENXIO);
  EXPECT_EQ(revision(), before + 2) << "the foreign attach and our one swap";
  // The foreign program stays where it was attached.
  auto now = query_device_programs(dir_);
  ASSERT_TRUE(now.ok());
  ASSERT_EQ(now->size(), 2u);
  EXPECT_EQ((*now)[1].id, foreign_.back()->id);
}

// The daemon's own path: observe() looks, grant() follows it; an attach in between is
// refused as stale, looked at again at once, and counted in the grant's report.
TEST_F(V2RevisionSwap, TheDaemonsGrantAfterItsLookCountsTheStaleSwap) {
  if (revision() == 0) GTEST_SKIP() << kNoRevisions;
  auto access = make_device_access(CgroupVersion::kV2);
  EXPECT_EQ(access->swaps_check_revision(dir_), std::optional<bool>(true));
  DesiredDevices desired;
  desired.wanted = wanted_;
  auto state = access->observe(dir_, desired);
  ASSERT_TRUE(state.ok()) << state.error().message;
  ASSERT_EQ(state->missing.size(), 1u);
  foreign_attach();
  const GrantReport report = access->grant(dir_, wanted_, state->missing);
  ASSERT_FALSE(report.failure) << report.failure->message;
  ASSERT_EQ(report.devices.size(), 1u);
  EXPECT_TRUE(report.devices[0].outcome.ok()) << report.devices[0].outcome.error().message;
  EXPECT_EQ(report.stale_swaps, 1u);
  EXPECT_EQ(report.programs_replaced, 1u);
  EXPECT_EQ(open_gpu(), ENXIO);
}

// Today's path, as on a kernel before 6.17: the swap carries no revision, names the program
// it replaces, and succeeds beside the foreign attach; nothing is counted stale.
TEST_F(V2RevisionSwap, WithoutRevisionsTheSwapNamesItsProgramAsBefore) {
  const std::uint64_t before = revision();
  DeviceProgramCache cache;
  auto look = snapshot_device_programs(dir_, cache);
  ASSERT_TRUE(look.ok()) << look.error().message;
  foreign_attach();
  auto repair = repair_device_programs(dir_, wanted_, cache, &*look, RevisionCheck::kNever);
  ASSERT_TRUE(repair.ok()) << repair.error().message;
  EXPECT_EQ(repair->stale, 0u);
  EXPECT_EQ(repair->checked, 0u);
  ASSERT_EQ(repair->replaced.size(), 1u);
  EXPECT_EQ(repair->replaced[0].old_id, runtime_->id);
  EXPECT_TRUE(repair->replaced[0].atomic);
  EXPECT_EQ(open_gpu(), ENXIO);
  if (before != 0) {
    EXPECT_EQ(revision(), before + 2);
  }
}

// Twins (another denying program with the same instructions) are detached after the swap,
// in the same round: the detach carries the revision the swap moved on to, and is not
// refused for the repair's own swap.
TEST_F(V2RevisionSwap, ADetachAfterTheRepairsOwnSwapIsNotStale) {
  const std::uint64_t before = revision();
  ForeignProgram twin("sd_devices", kSpec);
  ASSERT_EQ(twin.attach(dir_), 0);
  DeviceProgramCache cache;
  auto repair = repair_device_programs(dir_, wanted_, cache);
  ASSERT_TRUE(repair.ok()) << repair.error().message;
  EXPECT_EQ(repair->stale, 0u);
  EXPECT_EQ(repair->replaced.size(), 1u);
  EXPECT_EQ(repair->detached, 1u);
  if (before != 0) {
    EXPECT_EQ(repair->checked, 2u);
  }
  EXPECT_EQ(open_gpu(), ENXIO);
  auto now = query_device_programs(dir_);
  ASSERT_TRUE(now.ok());
  EXPECT_EQ(now->size(), 1u) << "the wrapper alone";
}

}  // namespace
}  // namespace gdw::test
