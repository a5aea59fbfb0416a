// The cgroup v2 backend on the real kernel with Debian's runc running a container in v2
// mode with its own eBPF device filter: the repair grants the GPU inside it and keeps what
// runc's program decides for everything else. A device node made with mknod opens with
// ENXIO when the cgroup allows it (no driver behind it) and EPERM when a program denies it.
#include <glob.h>
#include <gtest/gtest.h>

#include <cerrno>
#include <cstring>
#include <string>
#include <vector>

#include "backend/device_programs_v2.h"
#include "support/cgroup_sandbox.h"
#include "support/foreign_device_program.h"
#include "support/runc_container.h"
#include "support/sandbox_node.h"
#include "support/temp_dir.h"

namespace gdw::test {
namespace {

constexpr const char* kUnifiedRoot = "/sys/fs/cgroup/unified";

WantedDevice wanted(std::uint32_t major, std::uint32_t minor, std::uint8_t access, const std::string& name) {
  return WantedDevice{{DeviceType::kChar, major, minor}, access, name, "test"};
}

// Every runc call sees /sys/fs/cgroup/unified as /sys/fs/cgroup (runc then runs in v2 mode)
// in its own mount namespace; runc's state lives in its --root directory, shared by all.
const std::vector<std::string> kV2Wrapper{
    "unshare", "-m", "--propagation", "private", "sh", "-c",
    "mount --bind /sys/fs/cgroup/unified /sys/fs/cgroup && exec \"$0\" \"$@\""};

std::vector<std::string> leftover_cgroups(const std::string& name_prefix) {
  std::vector<std::string> found;
  glob_t g{};
  const std::string pattern = "/sys/fs/cgroup/*/" + name_prefix + "*";
  if (::glob(pattern.c_str(), GLOB_ONLYDIR, nullptr, &g) == 0)
    for (std::size_t i = 0; i < g.gl_pathc; ++i) found.emplace_back(g.gl_pathv[i]);
  ::globfree(&g);
  return found;
}

TEST(DeviceProgramsV2Runc, RepairGrantsAGpuInsideARealRuncContainerAndKeepsTheSpec) {
  if (!CgroupSandbox::available("unified") || !RuncContainer::available())
    GTEST_SKIP() << "needs root, cgroup2 at " << kUnifiedRoot << ", runc and busybox-static";
  const OciDeviceCgroupRule deny_all{false, DeviceRule{DeviceType::kAll, kAnyNumber, kAnyNumber, kAccessAll}};
  if (ForeignProgram probe("", {deny_all}); probe.fd < 0)
    GTEST_SKIP() << "BPF_PROG_LOAD of a cgroup device program refused: " << std::strerror(probe.load_errno);
  std::string sandbox_name;
  {
    CgroupSandbox sandbox("unified", "runcv2");
    sandbox_name = sandbox.name();
    // runc in v2 mode should only touch the unified hierarchy; clean up the v1 ones anyway.
    struct ControllerCleanup {
      std::string name;
      ~ControllerCleanup() {
        for (const char* ctrl : {"blkio", "cpu", "cpuacct", "cpuset", "devices", "freezer", "memory", "pids", "systemd"})
          remove_cgroup_tree(std::string("/sys/fs/cgroup/") + ctrl + "/" + name);
      }
    } cleanup{sandbox.name()};
    TempDir bundles("gdw-runc-v2");
    const std::string id = random_hex(64);
    const std::string cgroups_path = "/" + sandbox.name() + "/kubepods/burstable/pod" + random_uuid() + "/" + id;
    RuncContainer container({
        .id = id,
        .bundle_dir = bundles.path() + "/" + id,
        .cgroups_path = cgroups_path,
        .annotations = {},
        .allow = {{"c", 195, 255, "rw"}},  // nvidiactl only: the GPU was never granted
        .nodes = {{"/gpu/nvidia0", 195, 0}, {"/gpu/nvidiactl", 195, 255}, {"/gpu/nvidia1", 195, 1},
                  {"/gpu/tun", 10, 200}},
        .wrapper = kV2Wrapper,
    });
    ASSERT_TRUE(container.running()) << container.start_error();
    const std::string host_dir = kUnifiedRoot + cgroups_path;

    const std::vector<WantedDevice> desired{wanted(195, 0, kAccessReadWrite, "nvidia0")};

    auto before = query_device_programs(host_dir);
    ASSERT_TRUE(before.ok()) << before.error().message;
    ASSERT_EQ(before->size(), 1u) << "runc's eBPF device filter";
    EXPECT_EQ((*before)[0].owner, ProgramOwner::kRuntime) << (*before)[0].name;
    EXPECT_EQ(denied_by_programs(*before, desired), desired) << "runc's own code, run: it denies the GPU";
    // The interpreter follows runc's real instructions: its verdicts are the kernel's.
    const BpfCode& runc_code = (*before)[0].code;
    EXPECT_EQ(run_device_program(runc_code, {DeviceType::kChar, 1, 3}, kAccessReadWrite), Verdict::kAllow);
    EXPECT_EQ(run_device_program(runc_code, {DeviceType::kChar, 195, 255}, kAccessReadWrite), Verdict::kAllow);
    EXPECT_EQ(run_device_program(runc_code, {DeviceType::kChar, 195, 1}, kAccessRead), Verdict::kDeny);
    EXPECT_EQ(container.open_errno("/gpu/nvidia0"), EPERM) << "runc's filter denies the GPU";
    EXPECT_EQ(container.open_errno("/gpu/nvidiactl"), ENXIO);
    EXPECT_EQ(container.open_errno("/gpu/nvidia1"), EPERM);
    EXPECT_EQ(container.open_errno("/dev/null"), 0);
    const int tun_before = container.open_errno("/gpu/tun");

    auto repair = repair_device_programs(host_dir, desired);
    ASSERT_TRUE(repair.ok()) << repair.error().message;
    ASSERT_EQ(repair->replaced.size(), 1u);
    EXPECT_TRUE(repair->replaced[0].atomic);
    EXPECT_EQ(repair->replaced[0].old_id, (*before)[0].id);

    EXPECT_EQ(container.open_errno("/gpu/nvidia0"), ENXIO) << "granted inside the container";
    EXPECT_EQ(container.open_errno("/gpu/nvidiactl"), ENXIO);
    EXPECT_EQ(container.open_errno("/gpu/nvidia1"), EPERM) << "runc denies it: still denied";
    EXPECT_EQ(container.open_errno("/dev/null"), 0) << "runc's own built-ins, whatever its version";
    EXPECT_EQ(container.open_errno("/gpu/tun"), tun_before) << "tun decided as runc's program did";
    auto after = query_device_programs(host_dir);
    ASSERT_TRUE(after.ok()) << after.error().message;
    ASSERT_EQ(after->size(), 1u);
    EXPECT_EQ((*after)[0].id, repair->replaced[0].new_id);
    EXPECT_TRUE(denied_by_programs(*after, desired).empty());
  }
  EXPECT_EQ(leftover_cgroups(sandbox_name), std::vector<std::string>{});
}

}  // namespace
}  // namespace gdw::test
