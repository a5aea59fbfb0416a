// crun's layout with the systemd driver on cgroup v2, reproduced in test cgroups: the
// container's processes in `<scope>/container`, the runtime's device program attached
// there, and (after a DeviceAllow= of systemd's) another one on the scope. A program on the
// sub-cgroup denies as much as one on the scope: the v2 backend observes and repairs both,
// and a sub-cgroup of any other name is not the container's.
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>

#include <cerrno>
#include <cstring>

#include "backend/device_programs_v2.h"
#include "support/cgroup_sandbox.h"
#include "support/foreign_device_program.h"
#include "support/sandbox_node.h"
#include "support/temp_dir.h"

namespace gdw::test {
namespace {

OciDeviceCgroupRule allow(std::uint32_t major, std::uint32_t minor) {
  return {true, DeviceRule{DeviceType::kChar, major, minor, kAccessAll}};
}
const OciDeviceCgroupRule kDenyAll{false, DeviceRule{DeviceType::kAll, kAnyNumber, kAnyNumber, kAccessAll}};
const WantedDevice kGpu{{DeviceType::kChar, 195, 0}, kAccessReadWrite, "nvidia0", "test"};

class DeviceProgramsSubgroup : public ::testing::Test {
 protected:
  void SetUp() override {
    if (const std::string why = v2_device_programs_unavailable(); !why.empty()) GTEST_SKIP() << why;
    sandbox_ = std::make_unique<CgroupSandbox>("unified", "subgroup");
    scope_ = sandbox_->make("scope");
    sandbox_->make("scope/container");
    sandbox_->add_sleeper("scope/container");
    for (auto [name, major, minor] : {std::tuple{"nvidia0", 195u, 0u}, {"nvidia1", 195u, 1u}, {"pts9", 136u, 9u},
                                      {"tun", 10u, 200u}})
      ASSERT_EQ(::mknod((nodes_ / name).c_str(), S_IFCHR | 0666, makedev(major, minor)), 0) << name;
  }
  int open_errno(const std::string& name) { return sandbox_->open_errno("scope/container", nodes_ / name); }
  void attach(const std::string& rel, const std::vector<OciDeviceCgroupRule>& rules, const std::string& name = "") {
    ForeignProgram p(name, rules);
    ASSERT_GE(p.fd, 0) << std::strerror(p.load_errno);
    ASSERT_EQ(p.attach(sandbox_->path(rel)), 0);
  }

  TempDir nodes_{"gdw-subgroup-nodes"};
  std::unique_ptr<CgroupSandbox> sandbox_;
  std::string scope_;
};

TEST_F(DeviceProgramsSubgroup, AProgramOnCrunsSubgroupIsSeenAndWrappedThere) {
  attach("scope/container", {kDenyAll, allow(136, kAnyNumber)});  // crun's: no GPU
  ASSERT_EQ(open_errno("nvidia0"), EPERM);
  auto programs = query_device_programs(scope_);
  ASSERT_TRUE(programs.ok()) << programs.error().message;
  ASSERT_EQ(programs->size(), 1u);
  EXPECT_EQ((*programs)[0].subgroup, kCrunSubgroup);
  EXPECT_EQ(denied_by_programs(*programs, {kGpu}), std::vector<WantedDevice>{kGpu});

  auto repair = repair_device_programs(scope_, {kGpu});
  ASSERT_TRUE(repair.ok()) << repair.error().message;
  ASSERT_EQ(repair->replaced.size(), 1u);
  EXPECT_TRUE(repair->still_denied.empty());
  EXPECT_EQ(open_errno("nvidia0"), ENXIO) << "granted where the process is";
  EXPECT_EQ(open_errno("nvidia1"), EPERM);
  EXPECT_EQ(open_errno("tun"), EPERM);
  EXPECT_NE(open_errno("pts9"), EPERM);
  auto after = query_device_programs(sandbox_->path("scope/container"));
  ASSERT_TRUE(after.ok());
  EXPECT_TRUE(after->at(0).wrapper) << "ours replaced crun's on the sub-cgroup";
}

TEST_F(DeviceProgramsSubgroup, ProgramsOnTheScopeAndTheSubgroupAreBothRepaired) {
  attach("scope/container", {kDenyAll, allow(136, kAnyNumber)});
  attach("scope", {kDenyAll, allow(136, kAnyNumber)}, "sd_devices");  // systemd's, after a DeviceAllow=
  auto repair = repair_device_programs(scope_, {kGpu});
  ASSERT_TRUE(repair.ok()) << repair.error().message;
  EXPECT_EQ(repair->replaced.size(), 2u);
  ASSERT_EQ(repair->now.size(), 2u);
  EXPECT_EQ(repair->now[0].subgroup, "");
  EXPECT_EQ(repair->now[1].subgroup, kCrunSubgroup);
  EXPECT_EQ(open_errno("nvidia0"), ENXIO);
  EXPECT_EQ(open_errno("nvidia1"), EPERM);
}

TEST_F(DeviceProgramsSubgroup, ASubCgroupOfAnotherNameIsNotTheContainers) {
  sandbox_->make("scope/other");
  attach("scope/other", {kDenyAll});
  auto programs = query_device_programs(scope_);
  ASSERT_TRUE(programs.ok()) << programs.error().message;
  EXPECT_TRUE(programs->empty());
  auto repair = repair_device_programs(scope_, {kGpu});
  ASSERT_TRUE(repair.ok()) << repair.error().message;
  EXPECT_TRUE(repair->replaced.empty()) << "nothing of ours on a cgroup that is not the container's";
}

}  // namespace
}  // namespace gdw::test
