// The cgroup v2 backend's look at one program the probe saw attached (observe_attached),
// through the DeviceAccess the daemon uses, on the real kernel: the grant that follows such
// a look must leave the container as whole as a grant from a look at every program, and
// keep every restriction it did not add. Device nodes made with mknod open with ENXIO where
// the cgroup allows them (no driver) and EPERM where a device program denies them.
#include "backend/device_access.h"

#include <gtest/gtest.h>
#include <linux/bpf.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>

#include <cerrno>
#include <chrono>
#include <cstring>
#include <thread>
#include <tuple>

#include "backend/device_program_cache.h"
#include "support/cgroup_sandbox.h"
#include "support/foreign_device_program.h"
#include "support/temp_dir.h"

namespace gdw::test {
namespace {

OciDeviceCgroupRule allow(std::uint32_t major, std::uint32_t minor) {
  return {true, DeviceRule{DeviceType::kChar, major, minor, kAccessAll}};
}
const OciDeviceCgroupRule kDenyAll{false, DeviceRule{DeviceType::kAll, kAnyNumber, kAnyNumber, kAccessAll}};
// A runtime's spec: the terminals, no GPU, no tun.
const std::vector<OciDeviceCgroupRule> kSpec{kDenyAll, allow(136, kAnyNumber)};
// Another manager's program, other instructions: /dev/null and the terminals.
const std::vector<OciDeviceCgroupRule> kOtherSpec{kDenyAll, allow(1, 3), allow(136, kAnyNumber)};
const WantedDevice kGpu{{DeviceType::kChar, 195, 0}, kAccessReadWrite, "nvidia0", "test"};
constexpr std::uint32_t kMulti = BPF_F_ALLOW_MULTI;

class ObserveAttached : public ::testing::Test {
 protected:
  void SetUp() override {
    if (const std::string why = v2_device_programs_unavailable(); !why.empty()) GTEST_SKIP() << why;
    sandbox_ = std::make_unique<CgroupSandbox>("unified", "observe-attached");
    dir_ = sandbox_->make("ctr");
    sandbox_->add_sleeper("ctr");
    for (auto [name, major, minor] : {std::tuple{"nvidia0", 195u, 0u}, {"nvidia1", 195u, 1u}, {"pts9", 136u, 9u},
                                      {"tun", 10u, 200u}})
      ASSERT_EQ(::mknod((nodes_ / name).c_str(), S_IFCHR | 0666, makedev(major, minor)), 0) << name;
    desired_.wanted = {kGpu};
    desired_.holds_gpu = true;
  }

  int open_errno(const std::string& name, const std::string& rel = "ctr") {
    return sandbox_->open_errno(rel, nodes_ / name);
  }
  // Loaded and attached (BPF_F_ALLOW_MULTI), as a runtime or systemd does; its id.
  std::uint32_t attach(const std::string& rel, const std::vector<OciDeviceCgroupRule>& rules,
                       const std::string& name = "") {
    ForeignProgram p(name, rules);
    EXPECT_GE(p.fd, 0) << std::strerror(p.load_errno);
    EXPECT_EQ(p.attach(sandbox_->path(rel)), 0);
    return p.id;
  }
  // The container whole, as the daemon finds it at its start: a look at every program.
  void look_whole() {
    auto state = access_->observe(dir_, desired_);
    ASSERT_TRUE(state.ok()) << state.error().message;
    ASSERT_TRUE(state->missing.empty());
  }
  // What the daemon does after the probe's record of `prog_id`: the look, then the grant.
  void repair_after_attach_of(std::uint32_t prog_id) {
    auto state = access_->observe_attached(dir_, desired_, {prog_id, kMulti});
    ASSERT_TRUE(state.ok()) << state.error().message;
    ASSERT_EQ(state->missing, desired_.wanted);
    GrantReport report = access_->grant(dir_, desired_.wanted, state->missing);
    ASSERT_FALSE(report.failure) << report.failure->message;
    ASSERT_EQ(report.devices.size(), 1u);
    EXPECT_TRUE(report.devices[0].outcome.ok()) << report.devices[0].outcome.error().message;
    ASSERT_TRUE(report.programs_now) << "the grant ends with a look at every program";
  }
  void expect_only_the_gpu_added(const std::string& rel = "ctr") {
    EXPECT_EQ(open_errno("nvidia0", rel), ENXIO) << "granted";
    EXPECT_EQ(open_errno("nvidia1", rel), EPERM) << "another pod's GPU stays denied";
    EXPECT_EQ(open_errno("tun", rel), EPERM) << "the spec's denial is kept";
    EXPECT_NE(open_errno("pts9", rel), EPERM) << "the spec's allow is kept";
  }

  TempDir nodes_{"gdw-observe-attached-nodes"};
  std::unique_ptr<CgroupSandbox> sandbox_;
  std::string dir_;
  DesiredDevices desired_;
  std::unique_ptr<DeviceAccess> access_ = make_device_access(CgroupVersion::kV2);
};

TEST_F(ObserveAttached, AnotherDenyingProgramThanTheOneReportedIsRepairedToo) {
  look_whole();
  attach("ctr", kOtherSpec, "sd_devices");  // not reported: its record was lost
  const std::uint32_t reported = attach("ctr", kSpec);
  ASSERT_EQ(open_errno("nvidia0"), EPERM);
  auto state = access_->observe_attached(dir_, desired_, {reported, kMulti});
  ASSERT_TRUE(state.ok()) << state.error().message;
  EXPECT_FALSE(state->programs) << "a look at one program does not count the others";
  repair_after_attach_of(reported);
  expect_only_the_gpu_added();
}

TEST_F(ObserveAttached, AProgramTakingNothingAwayGetsALookAtEveryProgram) {
  look_whole();
  auto with_gpu = kSpec;
  with_gpu.push_back(allow(195, 0));
  const std::uint32_t harmless = attach("ctr", with_gpu);
  auto state = access_->observe_attached(dir_, desired_, {harmless, kMulti});
  ASSERT_TRUE(state.ok()) << state.error().message;
  EXPECT_TRUE(state->missing.empty());
  ASSERT_TRUE(state->programs) << "the container was looked at whole";
  EXPECT_EQ((*state->programs)[ProgramOwner::kRuntime], 1u);
}

// crun puts the container's processes in <scope>/container: a look at the scope's one
// program would not see a denying program there, so the look is whole.
TEST_F(ObserveAttached, ACrunSubgroupIsRepairedWithTheReportedProgram) {
  sandbox_->make("ctr/container");
  sandbox_->add_sleeper("ctr/container");
  look_whole();
  attach("ctr/container", kSpec);  // crun's, its record not seen
  const std::uint32_t reported = attach("ctr", kOtherSpec, "sd_devices");
  auto state = access_->observe_attached(dir_, desired_, {reported, kMulti});
  ASSERT_TRUE(state.ok()) << state.error().message;
  EXPECT_TRUE(state->programs) << "a whole look: the last one saw the sub-cgroup";
  GrantReport report = access_->grant(dir_, desired_.wanted, state->missing);
  ASSERT_FALSE(report.failure) << report.failure->message;
  expect_only_the_gpu_added("ctr/container");
}

// systemd ANDs a new program on at each daemon-reload and leaves our wrapper of the last one
// attached. With no look at the cgroup for longer than the cache remembers a wrapper copy
// there, the copy looks free to a look at one program; the kernel refuses it a second time
// in one cgroup, and the grant must still end with the GPU allowed.
TEST_F(ObserveAttached, AWrapperCopyAttachedLongAgoIsNotAttachedTwice) {
  look_whole();
  const std::uint32_t first = attach("ctr", kOtherSpec, "sd_devices");
  repair_after_attach_of(first);
  ASSERT_EQ(open_errno("nvidia0"), ENXIO);
  std::this_thread::sleep_for(DeviceProgramCache::kReuseAfter + std::chrono::milliseconds(500));
  const std::uint32_t reload = attach("ctr", kOtherSpec, "sd_devices");  // the same instructions again
  ASSERT_EQ(open_errno("nvidia0"), EPERM);
  repair_after_attach_of(reload);
  expect_only_the_gpu_added();
}

// The container's directory is kept open between looks; removed and made again at the same
// path (a pod's container restarted into the same cgroup path), the kept one is of a dead
// cgroup. A grant from a look at one program through it fails; it is done again from a
// whole look through the path.
TEST_F(ObserveAttached, ACgroupMadeAgainAtItsPathIsRepairedThroughThePath) {
  look_whole();
  sandbox_->remove("ctr");
  sandbox_->make("ctr");
  sandbox_->add_sleeper("ctr");
  const std::uint32_t reported = attach("ctr", kSpec);
  ASSERT_EQ(open_errno("nvidia0"), EPERM);
  repair_after_attach_of(reported);
  expect_only_the_gpu_added();
}

// The attach hook reports an attach once for each cgroup below its target: the second
// record, read after the repair of the first, must not bring a second grant.
TEST_F(ObserveAttached, AnAttachReportedTwiceIsRepairedOnce) {
  look_whole();
  ForeignProgram runtimes(std::string(), kSpec);  // its attacher still holds it
  ASSERT_GE(runtimes.fd, 0) << std::strerror(runtimes.load_errno);
  ASSERT_EQ(runtimes.attach(dir_), 0);
  const std::uint32_t reported = runtimes.id;
  repair_after_attach_of(reported);
  ASSERT_EQ(open_errno("nvidia0"), ENXIO);
  auto again = access_->observe_attached(dir_, desired_, {reported, kMulti});
  ASSERT_TRUE(again.ok()) << again.error().message;
  EXPECT_TRUE(again->missing.empty()) << "nothing is missing: the program is no longer attached";
  EXPECT_TRUE(again->programs) << "told by a look at every program";
}

}  // namespace
}  // namespace gdw::test
