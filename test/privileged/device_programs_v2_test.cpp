// The cgroup v2 backend on the real kernel: test cgroups under /sys/fs/cgroup/unified with
// device programs of "other managers" attached (assembled here, independent of
// bpf/device_filter.bpf.c), and Debian's runc running a container in v2 mode with its own
// eBPF device filter. A device node made with mknod opens with ENXIO when the cgroup
// allows it (no driver behind it) and EPERM when a device program denies it.
#include "backend/device_programs_v2.h"

#include <bpf/bpf.h>
#include <fcntl.h>
#include <glob.h>
#include <gtest/gtest.h>
#include <linux/bpf.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <iostream>
#include <memory>

#include "runtime/oci_config.h"
#include "support/cgroup_sandbox.h"
#include "support/foreign_device_program.h"
#include "support/runc_container.h"
#include "support/sandbox_node.h"
#include "support/temp_dir.h"

namespace gdw::test {
namespace {

constexpr const char* kUnifiedRoot = "/sys/fs/cgroup/unified";

OciDeviceCgroupRule allow(DeviceType type, std::uint32_t major, std::uint32_t minor, std::uint8_t access) {
  return {true, DeviceRule{type, major, minor, access}};
}
const OciDeviceCgroupRule kDenyAll{false, DeviceRule{DeviceType::kAll, kAnyNumber, kAnyNumber, kAccessAll}};

std::string bpf_unavailable_reason() {
  ForeignProgram probe("", {kDenyAll});
  if (probe.fd >= 0) return "";
  return std::string("BPF_PROG_LOAD of a cgroup device program refused: ") + std::strerror(probe.load_errno);
}

std::vector<std::uint32_t> ids_of(const std::vector<AttachedDeviceProgram>& programs) {
  std::vector<std::uint32_t> ids;
  for (const auto& p : programs) ids.push_back(p.id);
  return ids;
}

// ---- (a) test cgroups with programs of "runc" and "systemd" ---------------------------

// The container's spec: deny everything, then /dev/null and the terminals. systemd's
// program after a reload enforces the same list (its DeviceAllow= came from the spec).
const std::vector<OciDeviceCgroupRule> kSpec{kDenyAll, allow(DeviceType::kChar, 1, 3, kAccessAll),
                                             allow(DeviceType::kChar, 136, kAnyNumber, kAccessAll)};

WantedDevice wanted(std::uint32_t major, std::uint32_t minor, std::uint8_t access, const std::string& name) {
  return WantedDevice{{DeviceType::kChar, major, minor}, access, name, "test"};
}

class DeviceProgramsV2 : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!CgroupSandbox::available("unified"))
      GTEST_SKIP() << "needs root and a writable cgroup2 hierarchy at " << kUnifiedRoot;
    if (auto reason = bpf_unavailable_reason(); !reason.empty()) GTEST_SKIP() << reason;
    sandbox_ = std::make_unique<CgroupSandbox>("unified", "v2");
    dir_ = sandbox_->make("ctr");
    sandbox_->add_sleeper("ctr");
    make_node("nvidia0", 195, 0);  // the desired GPU
    make_node("nvidia1", 195, 1);  // another pod's GPU: the spec denies it
    make_node("nvidia-uvm", kUvmMajor, 0);
    make_node("null", 1, 3);       // the spec allows it (a real driver: opens fine)
    make_node("pts9", 136, 9);     // the spec allows it by wildcard
    make_node("tun", 10, 200);     // the spec denies it
  }

  void make_node(const std::string& name, unsigned major, unsigned minor, mode_t type = S_IFCHR) {
    std::string path = nodes_ / name;
    ASSERT_EQ(::mknod(path.c_str(), type | 0666, makedev(major, minor)), 0) << path << ": " << std::strerror(errno);
  }
  int open_errno(const std::string& name, int flags = O_RDWR) {
    return sandbox_->open_errno("ctr", nodes_ / name, flags);
  }
  bool denied(const std::string& name, int flags = O_RDWR) { return open_errno(name, flags) == EPERM; }

  std::uint32_t attach_foreign(const std::string& name, const std::vector<OciDeviceCgroupRule>& rules,
                               unsigned flags = BPF_F_ALLOW_MULTI) {
    ForeignProgram p(name, rules);
    EXPECT_GE(p.fd, 0) << std::strerror(p.load_errno);
    int cgroup = ::open(dir_.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    EXPECT_EQ(bpf_prog_attach(p.fd, cgroup, BPF_CGROUP_DEVICE, flags), 0) << std::strerror(errno);
    ::close(cgroup);
    return p.id;
  }

  std::vector<AttachedDeviceProgram> query() {
    auto programs = query_device_programs(dir_);
    EXPECT_TRUE(programs.ok()) << programs.error().message;
    return programs.ok() ? *programs : std::vector<AttachedDeviceProgram>{};
  }

  // The spec's verdicts, which every state of the cgroup must keep outside the desired set.
  void expect_spec_kept() {
    EXPECT_EQ(open_errno("null"), 0) << "the spec allows /dev/null";
    EXPECT_NE(open_errno("pts9"), EPERM) << "the spec allows c 136:*";
    EXPECT_TRUE(denied("tun")) << "the spec denies tun";
  }

  TempDir nodes_{"gdw-v2-nodes"};
  std::unique_ptr<CgroupSandbox> sandbox_;
  std::string dir_;
};

TEST_F(DeviceProgramsV2, ReplacesRuntimeAndSystemdProgramsWithTheUnionAndKeepsTheSpec) {
  const std::uint32_t runtime_id = attach_foreign("", kSpec);
  const std::uint32_t systemd_id = attach_foreign("sd_devices", kSpec);
  const std::vector<WantedDevice> desired{wanted(195, 0, kAccessReadWrite, "nvidia0"),
                                          wanted(kUvmMajor, 0, kAccessRead, "nvidia-uvm")};

  auto before = query();
  ASSERT_EQ(before.size(), 2u);
  EXPECT_EQ(before[0].id, runtime_id);
  EXPECT_EQ(before[0].owner, ProgramOwner::kRuntime);
  EXPECT_EQ(before[1].name, "sd_devices");
  EXPECT_EQ(before[1].owner, ProgramOwner::kSystemd);
  EXPECT_FALSE(before[0].link || before[1].link);
  EXPECT_EQ(denied_by_programs(before, kSpec, desired), desired);
  EXPECT_TRUE(denied("nvidia0"));
  EXPECT_TRUE(denied("nvidia-uvm", O_RDONLY));
  expect_spec_kept();

  auto repair = install_union_program(dir_, kSpec, desired);
  ASSERT_TRUE(repair.ok()) << repair.error().message;
  EXPECT_FALSE(repair->used_replace) << "two programs were attached: attach, then detach both";
  EXPECT_EQ(repair->detached_ids, (std::vector<std::uint32_t>{runtime_id, systemd_id}));
  EXPECT_TRUE(repair->left_attached.empty());

  EXPECT_EQ(open_errno("nvidia0"), ENXIO) << "granted";
  EXPECT_EQ(open_errno("nvidia-uvm", O_RDONLY), ENXIO) << "granted for reading";
  EXPECT_TRUE(denied("nvidia-uvm", O_RDWR)) << "desired access was read only";
  EXPECT_TRUE(denied("nvidia1")) << "not desired, not in the spec";
  expect_spec_kept();

  auto after = query();
  ASSERT_EQ(after.size(), 1u);
  EXPECT_EQ(after[0].id, repair->attached_id);
  EXPECT_EQ(after[0].name, kOurProgramName);
  EXPECT_EQ(after[0].owner, ProgramOwner::kOurs);
  ASSERT_TRUE(after[0].rules.has_value()) << "rules read back from the program's .rodata";
  EXPECT_EQ(*after[0].rules, union_rules(kSpec, desired));
  EXPECT_TRUE(denied_by_programs(after, kSpec, desired).empty());

  // The allocation changed: the GPU is now nvidia1. Ours is the only program, so it is
  // replaced atomically.
  const std::vector<WantedDevice> desired2{wanted(195, 1, kAccessReadWrite, "nvidia1")};
  EXPECT_EQ(denied_by_programs(after, kSpec, desired2), desired2) << "ours was built for the old set";
  auto second = install_union_program(dir_, kSpec, desired2);
  ASSERT_TRUE(second.ok()) << second.error().message;
  EXPECT_TRUE(second->used_replace);
  EXPECT_EQ(second->detached_ids, std::vector<std::uint32_t>{repair->attached_id});
  EXPECT_EQ(ids_of(query()), std::vector<std::uint32_t>{second->attached_id});
  EXPECT_EQ(open_errno("nvidia1"), ENXIO);
  EXPECT_TRUE(denied("nvidia0")) << "no longer desired";
  EXPECT_TRUE(denied("nvidia-uvm", O_RDONLY));
  expect_spec_kept();
}

TEST_F(DeviceProgramsV2, ASingleRuntimeProgramIsReplacedAtomically) {
  const std::uint32_t runtime_id = attach_foreign("", kSpec);
  const std::vector<WantedDevice> desired{wanted(195, 0, kAccessReadWrite, "nvidia0")};
  ASSERT_TRUE(denied("nvidia0"));
  auto repair = install_union_program(dir_, kSpec, desired);
  ASSERT_TRUE(repair.ok()) << repair.error().message;
  EXPECT_TRUE(repair->used_replace);
  EXPECT_EQ(repair->detached_ids, std::vector<std::uint32_t>{runtime_id});
  EXPECT_EQ(ids_of(query()), std::vector<std::uint32_t>{repair->attached_id});
  EXPECT_EQ(open_errno("nvidia0"), ENXIO);
  EXPECT_TRUE(denied("nvidia1"));
  expect_spec_kept();
}

TEST_F(DeviceProgramsV2, ALinkAttachedProgramIsReportedAndStillDenies) {
  ForeignProgram runtime("", kSpec);
  ASSERT_GE(runtime.fd, 0) << std::strerror(runtime.load_errno);
  int cgroup = ::open(dir_.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  int link = bpf_link_create(runtime.fd, cgroup, BPF_CGROUP_DEVICE, nullptr);
  ::close(cgroup);
  ASSERT_GE(link, 0) << "bpf_link_create: " << std::strerror(errno);

  auto before = query();
  ASSERT_EQ(before.size(), 1u);
  EXPECT_TRUE(before[0].link);
  EXPECT_EQ(before[0].id, runtime.id);

  const std::vector<WantedDevice> desired{wanted(195, 0, kAccessReadWrite, "nvidia0")};
  auto repair = install_union_program(dir_, kSpec, desired);
  ASSERT_TRUE(repair.ok()) << repair.error().message;
  EXPECT_FALSE(repair->used_replace) << "a link-attached program cannot be replaced by BPF_F_REPLACE";
  ASSERT_EQ(repair->left_attached.size(), 1u);
  EXPECT_EQ(repair->left_attached[0].program.id, runtime.id);
  EXPECT_NE(repair->left_attached[0].reason.find("bpf_link"), std::string::npos) << repair->left_attached[0].reason;

  auto both = query();
  EXPECT_EQ(both.size(), 2u);
  EXPECT_EQ(denied_by_programs(both, kSpec, desired), desired) << "the link's program still denies the GPU";
  EXPECT_TRUE(denied("nvidia0"));
  expect_spec_kept();

  ::close(link);  // the link's holder goes away: its program is detached with it
  EXPECT_TRUE(eventually([&] { return query().size() == 1; }));
  EXPECT_TRUE(denied_by_programs(query(), kSpec, desired).empty());
  EXPECT_EQ(open_errno("nvidia0"), ENXIO);
}

TEST_F(DeviceProgramsV2, RefusesACgroupWhoseProgramIsNotMultiAttached) {
  const std::uint32_t legacy_id = attach_foreign("", kSpec, 0);
  auto repair = install_union_program(dir_, kSpec, {wanted(195, 0, kAccessReadWrite, "nvidia0")});
  ASSERT_FALSE(repair.ok());
  EXPECT_NE(repair.error().message.find("BPF_F_ALLOW_MULTI"), std::string::npos) << repair.error().message;
  EXPECT_NE(repair.error().message.find(dir_), std::string::npos) << repair.error().message;
  EXPECT_EQ(ids_of(query()), std::vector<std::uint32_t>{legacy_id}) << "left as it was";
  EXPECT_TRUE(denied("nvidia0"));
}

TEST_F(DeviceProgramsV2, RejectsMoreRulesThanTheFilterHoldsAndChangesNothing) {
  const std::uint32_t runtime_id = attach_foreign("", kSpec);
  std::vector<WantedDevice> desired;
  for (std::uint32_t minor = 0; minor < kMaxProgramRules; ++minor)
    desired.push_back(wanted(195, minor, kAccessReadWrite, "nvidia" + std::to_string(minor)));
  auto repair = install_union_program(dir_, kSpec, desired);
  ASSERT_FALSE(repair.ok());
  EXPECT_NE(repair.error().message.find("limit of 256"), std::string::npos) << repair.error().message;
  EXPECT_EQ(ids_of(query()), std::vector<std::uint32_t>{runtime_id});
}

TEST_F(DeviceProgramsV2, MissingCgroupIsAnErrorNamingIt) {
  const std::string gone = sandbox_->path("no-such-container");
  auto programs = query_device_programs(gone);
  ASSERT_FALSE(programs.ok());
  EXPECT_NE(programs.error().message.find(gone), std::string::npos) << programs.error().message;
  auto repair = install_union_program(gone, kSpec, {});
  ASSERT_FALSE(repair.ok());
  EXPECT_NE(repair.error().message.find(gone), std::string::npos) << repair.error().message;
}

// The kernel running our program agrees with oci_rules_allow on rule lists mixing allows,
// denies, wildcards, type `a` and partial access, for every node and open mode.
TEST_F(DeviceProgramsV2, ProgramVerdictsMatchTheRuleSemanticsOnRandomRuleLists) {
  struct Node {
    std::string name;
    DeviceNumber dev;
  };
  std::vector<Node> nodes{{"nvidia0", {DeviceType::kChar, 195, 0}},
                          {"nvidia1", {DeviceType::kChar, 195, 1}},
                          {"null", {DeviceType::kChar, 1, 3}}};
  for (unsigned minor : {0u, 1u}) {  // block major 240: reserved for local use, no driver
    std::string name = "blk" + std::to_string(minor);
    make_node(name, 240, minor, S_IFBLK);
    nodes.push_back({name, {DeviceType::kBlock, 240, minor}});
  }
  const std::vector<std::pair<int, std::uint8_t>> modes{
      {O_RDONLY, kAccessRead}, {O_WRONLY, kAccessWrite}, {O_RDWR, kAccessReadWrite}};
  const DeviceType types[] = {DeviceType::kAll, DeviceType::kChar, DeviceType::kBlock};
  const std::uint32_t majors[] = {195, 1, 240, kAnyNumber};
  const std::uint32_t minors[] = {0, 1, 3, kAnyNumber};
  std::uint32_t seed = 12345;
  auto next = [&seed](std::uint32_t n) {
    seed = seed * 1103515245u + 12345u;
    return (seed >> 16) % n;
  };
  int allowed = 0, refused = 0;
  for (int round = 0; round < 16; ++round) {
    // A default first, as specs have (allow or deny everything), then exceptions.
    std::vector<OciDeviceCgroupRule> rules{
        {next(2) == 1, DeviceRule{DeviceType::kAll, kAnyNumber, kAnyNumber, kAccessAll}}};
    const std::uint32_t length = 1 + next(6);
    for (std::uint32_t i = 0; i < length; ++i)
      rules.push_back({next(2) == 1, DeviceRule{types[next(3)], majors[next(4)], minors[next(4)],
                                                static_cast<std::uint8_t>(1 + next(7))}});
    auto repair = install_union_program(dir_, rules, {});
    ASSERT_TRUE(repair.ok()) << repair.error().message;
    for (const auto& node : nodes)
      for (const auto& [flags, access] : modes) {
        const bool expected = oci_rules_allow(rules, node.dev, access);
        ++(expected ? allowed : refused);
        EXPECT_EQ(!denied(node.name, flags), expected)
            << "round " << round << ", " << node.name << " with access " << format_access(access);
      }
  }
  EXPECT_GT(allowed, 50) << "the rule lists must exercise both verdicts";
  EXPECT_GT(refused, 50);
}

// How long a repair takes (load + attach + detach), for both paths; repeated repairs must
// never pile up programs.
TEST_F(DeviceProgramsV2, RepeatedRepairsLeaveOneProgramAndTakeMilliseconds) {
  using Clock = std::chrono::steady_clock;
  const std::vector<WantedDevice> desired{wanted(195, 0, kAccessReadWrite, "nvidia0")};
  const auto spec = runc_enforced_rules(kSpec, {}, RuncBuiltins::kRunc1_2);  // a realistic size
  auto micros = [](Clock::duration d) { return std::chrono::duration_cast<std::chrono::microseconds>(d).count(); };
  std::vector<long> replace_us, attach_detach_us;
  for (int i = 0; i < 20; ++i) {
    attach_foreign("", spec);
    attach_foreign("sd_devices", spec);  // ours + two others: attach, then detach three
    auto start = Clock::now();
    auto repair = install_union_program(dir_, spec, desired);
    attach_detach_us.push_back(micros(Clock::now() - start));
    ASSERT_TRUE(repair.ok()) << repair.error().message;
    ASSERT_FALSE(repair->used_replace);
    start = Clock::now();
    repair = install_union_program(dir_, spec, desired);
    replace_us.push_back(micros(Clock::now() - start));
    ASSERT_TRUE(repair.ok()) << repair.error().message;
    ASSERT_TRUE(repair->used_replace);
    ASSERT_EQ(ids_of(query()), std::vector<std::uint32_t>{repair->attached_id});
  }
  EXPECT_EQ(open_errno("nvidia0"), ENXIO);
  expect_spec_kept();
  auto report = [](const char* what, std::vector<long> v) {
    std::sort(v.begin(), v.end());
    std::cout << "install_union_program (" << what << ", " << v.size() << " runs): median " << v[v.size() / 2]
              << " us, max " << v.back() << " us\n";
  };
  report("BPF_F_REPLACE", replace_us);
  report("attach, then detach the 2-3 others", attach_detach_us);
}

// ---- (b) Debian's runc in cgroup v2 mode ---------------------------------------------

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
  if (auto reason = bpf_unavailable_reason(); !reason.empty()) GTEST_SKIP() << reason;
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

    auto spec = parse_oci_config(read_file(bundles.path() + "/" + id + "/config.json"));
    ASSERT_TRUE(spec.ok()) << spec.error().message;
    const auto enforced = runc_enforced_rules(spec->device_rules, spec->devices, RuncBuiltins::kRunc1_1);
    const std::vector<WantedDevice> desired{wanted(195, 0, kAccessReadWrite, "nvidia0")};

    auto before = query_device_programs(host_dir);
    ASSERT_TRUE(before.ok()) << before.error().message;
    ASSERT_EQ(before->size(), 1u) << "runc's eBPF device filter";
    EXPECT_EQ((*before)[0].owner, ProgramOwner::kRuntime) << (*before)[0].name;
    EXPECT_EQ(denied_by_programs(*before, enforced, desired), desired);
    EXPECT_EQ(container.open_errno("/gpu/nvidia0"), EPERM) << "runc's filter denies the GPU";
    EXPECT_EQ(container.open_errno("/gpu/nvidiactl"), ENXIO);
    EXPECT_EQ(container.open_errno("/gpu/nvidia1"), EPERM);
    EXPECT_EQ(container.open_errno("/dev/null"), 0);
    EXPECT_NE(container.open_errno("/gpu/tun"), EPERM) << "runc 1.1 allows tun by default";

    auto repair = install_union_program(host_dir, enforced, desired);
    ASSERT_TRUE(repair.ok()) << repair.error().message;
    EXPECT_TRUE(repair->used_replace);
    EXPECT_EQ(repair->detached_ids, std::vector<std::uint32_t>{(*before)[0].id});

    EXPECT_EQ(container.open_errno("/gpu/nvidia0"), ENXIO) << "granted inside the container";
    EXPECT_EQ(container.open_errno("/gpu/nvidiactl"), ENXIO);
    EXPECT_EQ(container.open_errno("/gpu/nvidia1"), EPERM) << "the spec denies it: still denied";
    EXPECT_EQ(container.open_errno("/dev/null"), 0) << "runc's built-in devices are kept";
    EXPECT_NE(container.open_errno("/gpu/tun"), EPERM);
    auto after = query_device_programs(host_dir);
    ASSERT_TRUE(after.ok()) << after.error().message;
    EXPECT_EQ(ids_of(*after), std::vector<std::uint32_t>{repair->attached_id});
    EXPECT_TRUE(denied_by_programs(*after, enforced, desired).empty());
  }
  EXPECT_EQ(leftover_cgroups(sandbox_name), std::vector<std::string>{});
}

}  // namespace
}  // namespace gdw::test
