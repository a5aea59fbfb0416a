// The container directories the cgroup v2 backend keeps open between looks
// (backend/kept_cgroup_dirs.h), on the real kernel: a look through a kept directory sees
// what a look through the path sees, crun's sub-cgroup included; a directory whose cgroup
// was removed is not trusted (the kernel refuses it), so a removed container reads as gone
// and a path re-created under the same name is read afresh, never through the old cgroup.
#include "backend/kept_cgroup_dirs.h"

#include <bpf/bpf.h>
#include <fcntl.h>
#include <gtest/gtest.h>
#include <linux/bpf.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "backend/device_program_cache.h"
#include "backend/device_programs_v2.h"
#include "runtime/cgroup_names.h"
#include "support/cgroup_sandbox.h"
#include "support/foreign_device_program.h"

namespace gdw::test {
namespace {

const OciDeviceCgroupRule kDenyAll{false, DeviceRule{DeviceType::kAll, kAnyNumber, kAnyNumber, kAccessAll}};
const OciDeviceCgroupRule kAllowNull{true, DeviceRule{DeviceType::kChar, 1, 3, kAccessAll}};

class KeptCgroupDirs : public ::testing::Test {
 protected:
  void SetUp() override {
    if (const std::string why = v2_device_programs_unavailable(); !why.empty()) GTEST_SKIP() << why;
    sandbox_ = std::make_unique<CgroupSandbox>("unified", "kept");
    dir_ = sandbox_->make("ctr");
  }

  // A program of another manager's, attached to `dir`; its id.
  std::uint32_t attach(const std::string& dir, const std::vector<OciDeviceCgroupRule>& rules) {
    ForeignProgram p("", rules);
    EXPECT_GE(p.fd, 0) << std::strerror(p.load_errno);
    const int cgroup = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    EXPECT_EQ(bpf_prog_attach(p.fd, cgroup, BPF_CGROUP_DEVICE, BPF_F_ALLOW_MULTI), 0) << std::strerror(errno);
    ::close(cgroup);
    return p.id;
  }

  std::vector<std::uint32_t> ids(const DeviceProgramsSnapshot& s) {
    std::vector<std::uint32_t> out;
    for (const auto& p : s.all()) out.push_back(p.id);
    return out;
  }

  std::unique_ptr<CgroupSandbox> sandbox_;
  std::string dir_;
  DeviceProgramCache cache_;
  gdw::KeptCgroupDirs kept_{16};
};

TEST_F(KeptCgroupDirs, ALookThroughAKeptDirectorySeesWhatALookByPathSees) {
  const std::uint32_t runtime = attach(dir_, {kDenyAll, kAllowNull});
  auto first = snapshot_device_programs(dir_, cache_, &kept_);
  ASSERT_TRUE(first.ok()) << first.error().message;
  EXPECT_EQ(kept_.kept(), 1u);
  EXPECT_EQ(ids(*first), std::vector<std::uint32_t>{runtime});

  // crun's sub-cgroup appears after the first look, and a second program on the container.
  const std::string sub = sandbox_->make("ctr/" + std::string(kCrunSubgroup));
  const std::uint32_t crun = attach(sub, {kDenyAll});
  const std::uint32_t systemd = attach(dir_, {kDenyAll});
  auto kept_look = snapshot_device_programs(dir_, cache_, &kept_);
  ASSERT_TRUE(kept_look.ok()) << kept_look.error().message;
  EXPECT_EQ(*first->cgroups[0].fd, *kept_look->cgroups[0].fd) << "the same descriptor: no path walk";
  auto by_path = snapshot_device_programs(dir_, cache_);
  ASSERT_TRUE(by_path.ok()) << by_path.error().message;
  EXPECT_EQ(ids(*kept_look), (std::vector<std::uint32_t>{runtime, systemd, crun}));
  EXPECT_EQ(ids(*kept_look), ids(*by_path));
  ASSERT_EQ(kept_look->cgroups.size(), 2u);
  EXPECT_EQ(kept_look->cgroups[1].subgroup, kCrunSubgroup);
}

TEST_F(KeptCgroupDirs, ARemovedCgroupReadsAsGoneNotAsAnEmptyOne) {
  attach(dir_, {kDenyAll});
  ASSERT_TRUE(snapshot_device_programs(dir_, cache_, &kept_).ok());
  sandbox_->remove("ctr");
  auto look = snapshot_device_programs(dir_, cache_, &kept_);
  ASSERT_FALSE(look.ok()) << "a kept descriptor of a removed cgroup must not look like a cgroup without programs";
  EXPECT_EQ(look.error().code, ENOENT) << look.error().message;
  EXPECT_EQ(kept_.kept(), 0u) << "forgotten";
}

TEST_F(KeptCgroupDirs, APathReCreatedUnderTheSameNameIsReadAfresh) {
  attach(dir_, {kDenyAll});
  ASSERT_TRUE(snapshot_device_programs(dir_, cache_, &kept_).ok());
  sandbox_->remove("ctr");
  ASSERT_EQ(sandbox_->make("ctr"), dir_);
  const std::uint32_t fresh = attach(dir_, {kDenyAll, kAllowNull});
  auto look = snapshot_device_programs(dir_, cache_, &kept_);
  ASSERT_TRUE(look.ok()) << look.error().message;
  EXPECT_EQ(ids(*look), std::vector<std::uint32_t>{fresh}) << "the new cgroup's program, through a new descriptor";
  EXPECT_EQ(kept_.kept(), 1u);
}

TEST_F(KeptCgroupDirs, BeyondTheBoundDirectoriesAreOpenedPerLookAndStillRead) {
  gdw::KeptCgroupDirs none(0);
  const std::uint32_t runtime = attach(dir_, {kDenyAll});
  auto look = snapshot_device_programs(dir_, cache_, &none);
  ASSERT_TRUE(look.ok()) << look.error().message;
  EXPECT_EQ(ids(*look), std::vector<std::uint32_t>{runtime});
  EXPECT_EQ(none.kept(), 0u);
}

}  // namespace
}  // namespace gdw::test
