// The cgroup v2 backend on the real kernel: test cgroups under the cgroup2 hierarchy with
// device programs of "other managers" attached (assembled by test/support, independent of
// the daemon's code generator); Debian's runc in device_programs_v2_runc_test.cpp. A device node made with mknod opens with ENXIO when the cgroup
// allows it (no driver behind it) and EPERM when a device program denies it.
#include "backend/device_program_cache.h"
#include "backend/device_programs_v2.h"

#include <bpf/bpf.h>
#include <fcntl.h>
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
#include "support/sandbox_node.h"
#include "support/temp_dir.h"

namespace gdw::test {
namespace {

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

// The container's spec: deny everything, then /dev/null and the terminals. systemd's
// program after a reload enforces the same list (its DeviceAllow= came from the spec).
const std::vector<OciDeviceCgroupRule> kSpec{kDenyAll, allow(DeviceType::kChar, 1, 3, kAccessAll),
                                             allow(DeviceType::kChar, 136, kAnyNumber, kAccessAll)};
// A reload after the unit's DeviceAllow= lost the terminals: not the spec's program.
const std::vector<OciDeviceCgroupRule> kNarrowerSpec{kDenyAll, allow(DeviceType::kChar, 1, 3, kAccessAll)};

WantedDevice wanted(std::uint32_t major, std::uint32_t minor, std::uint8_t access, const std::string& name) {
  return WantedDevice{{DeviceType::kChar, major, minor}, access, name, "test"};
}

class DeviceProgramsV2 : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!CgroupSandbox::available("unified"))
      GTEST_SKIP() << "needs root and a writable cgroup2 hierarchy at " << cgroup2_root();
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

std::uint32_t count_of(const std::vector<AttachedDeviceProgram>& programs, std::uint32_t id) {
  return static_cast<std::uint32_t>(std::count_if(programs.begin(), programs.end(), [&](const auto& p) { return p.id == id; }));
}

TEST_F(DeviceProgramsV2, OnlyTheDenyingProgramIsWrappedAndTheSpecIsKept) {
  const std::uint32_t runtime_id = attach_foreign("", kSpec);
  auto spec_and_gpu = kSpec;
  spec_and_gpu.push_back(allow(DeviceType::kChar, 195, 0, kAccessReadWrite));
  spec_and_gpu.push_back(allow(DeviceType::kChar, kUvmMajor, 0, kAccessRead));
  const std::uint32_t systemd_id = attach_foreign("sd_devices", spec_and_gpu);
  const std::vector<WantedDevice> desired{wanted(195, 0, kAccessReadWrite, "nvidia0"),
                                          wanted(kUvmMajor, 0, kAccessRead, "nvidia-uvm")};
  auto before = query();
  ASSERT_EQ(before.size(), 2u);
  EXPECT_EQ(before[0].owner, ProgramOwner::kRuntime);
  EXPECT_EQ(before[1].owner, ProgramOwner::kSystemd);
  EXPECT_FALSE(before[0].code.empty()) << "translated instructions read back";
  EXPECT_TRUE(program_denies(before[0], desired[0]));
  EXPECT_FALSE(program_denies(before[1], desired[0])) << "run on its own code: it allows the GPU";
  EXPECT_EQ(denied_by_programs(before, desired), desired);
  EXPECT_TRUE(denied("nvidia0"));

  auto repair = repair_device_programs(dir_, desired);
  ASSERT_TRUE(repair.ok()) << repair.error().message;
  ASSERT_EQ(repair->replaced.size(), 1u);
  EXPECT_EQ(repair->replaced[0].old_id, runtime_id);
  EXPECT_TRUE(repair->replaced[0].atomic);
  EXPECT_TRUE(repair->left_attached.empty());
  EXPECT_TRUE(repair->still_denied.empty());
  EXPECT_EQ(ids_of(query()), (std::vector<std::uint32_t>{repair->replaced[0].new_id, systemd_id}))
      << "the wrapper took the runtime program's place; systemd's stays";

  EXPECT_EQ(open_errno("nvidia0"), ENXIO) << "granted";
  EXPECT_EQ(open_errno("nvidia-uvm", O_RDONLY), ENXIO) << "granted for reading";
  EXPECT_TRUE(denied("nvidia-uvm", O_RDWR)) << "wanted access was read only";
  EXPECT_TRUE(denied("nvidia1")) << "not wanted, not in the spec";
  expect_spec_kept();
  auto after = query();
  EXPECT_TRUE(after[0].wrapper);
  EXPECT_EQ(after[0].name, kOurProgramName);
  EXPECT_EQ(after[0].owner, ProgramOwner::kOurs);
  EXPECT_EQ(after[0].inner.size(), before[0].code.size()) << "the runtime's code, unchanged";
  EXPECT_TRUE(denied_by_programs(after, desired).empty());
}

// Issue 10, item 5: a third program (a security agent) denying /dev/null survives a
// systemd-style reload and the repair that follows.
TEST_F(DeviceProgramsV2, AThirdProgramsRestrictionIsKept) {
  auto runtime_rules = kSpec;  // the runtime's program as the NVIDIA hook leaves it
  runtime_rules.push_back(allow(DeviceType::kChar, 195, 0, kAccessReadWrite));
  attach_foreign("", runtime_rules);
  const std::uint32_t agent_id =
      attach_foreign("agent", {allow(DeviceType::kAll, kAnyNumber, kAnyNumber, kAccessAll),
                               {false, DeviceRule{DeviceType::kChar, 1, 3, kAccessAll}}});
  const std::vector<WantedDevice> desired{wanted(195, 0, kAccessReadWrite, "nvidia0")};
  ASSERT_EQ(open_errno("nvidia0"), ENXIO);
  ASSERT_TRUE(denied("null"));
  attach_foreign("sd_devices", kSpec);  // systemd's reload: a new program without the GPU
  ASSERT_TRUE(denied("nvidia0"));

  auto repair = repair_device_programs(dir_, desired);
  ASSERT_TRUE(repair.ok()) << repair.error().message;
  EXPECT_EQ(repair->replaced.size(), 1u) << "only systemd's new program denies the GPU";
  EXPECT_EQ(open_errno("nvidia0"), ENXIO);
  EXPECT_TRUE(denied("null")) << "the agent's restriction is kept";
  EXPECT_EQ(count_of(query(), agent_id), 1u) << "the agent's program stays attached, untouched";
  EXPECT_EQ(query().size(), 3u);
}

// Issue 10, item 5: a runtime program narrower than spec + runc's built-ins (no
// /dev/urandom) stays that narrow: the repair adds the GPU and nothing else.
TEST_F(DeviceProgramsV2, ANarrowRuntimeProgramStaysNarrow) {
  make_node("urandom", 1, 9);
  attach_foreign("", kSpec);  // deny all, /dev/null, pts: no urandom
  ASSERT_TRUE(denied("urandom"));
  auto repair = repair_device_programs(dir_, {wanted(195, 0, kAccessReadWrite, "nvidia0")});
  ASSERT_TRUE(repair.ok()) << repair.error().message;
  EXPECT_EQ(open_errno("nvidia0"), ENXIO);
  EXPECT_TRUE(denied("urandom")) << "not gained";
  EXPECT_TRUE(denied("urandom", O_RDONLY));
  expect_spec_kept();
}

TEST_F(DeviceProgramsV2, NothingIsTouchedWhileNothingIsMissing) {
  auto rules = kSpec;
  rules.push_back(allow(DeviceType::kChar, 195, 0, kAccessReadWrite));
  attach_foreign("", rules);
  attach_foreign("sd_devices", rules);
  const auto ids = ids_of(query());
  const std::vector<WantedDevice> desired{wanted(195, 0, kAccessReadWrite, "nvidia0")};
  EXPECT_TRUE(denied_by_programs(query(), desired).empty());
  auto repair = repair_device_programs(dir_, desired);
  ASSERT_TRUE(repair.ok()) << repair.error().message;
  EXPECT_TRUE(repair->replaced.empty());
  EXPECT_EQ(ids_of(query()), ids) << "same program ids";
}

// A second revocation (another reload) and an allocation change: the program count never
// grows by our doing, and a wrapper is never wrapped.
TEST_F(DeviceProgramsV2, ReRepairWrapsTheOriginalNotTheWrapper) {
  const std::uint32_t runtime_id = attach_foreign("", kSpec);
  const BpfCode original = query()[0].code;
  auto first = repair_device_programs(dir_, {wanted(195, 0, kAccessReadWrite, "nvidia0")});
  ASSERT_TRUE(first.ok()) << first.error().message;
  ASSERT_EQ(first->replaced.size(), 1u);
  EXPECT_EQ(first->replaced[0].old_id, runtime_id);

  // The allocation changes: the wrapper now denies a wanted device and is re-wrapped.
  const std::vector<WantedDevice> desired2{wanted(195, 1, kAccessReadWrite, "nvidia1")};
  auto second = repair_device_programs(dir_, desired2);
  ASSERT_TRUE(second.ok()) << second.error().message;
  ASSERT_EQ(second->replaced.size(), 1u);
  EXPECT_EQ(second->replaced[0].old_id, first->replaced[0].new_id);
  auto now = query();
  ASSERT_EQ(now.size(), 1u) << "the count does not grow";
  ASSERT_TRUE(now[0].wrapper);
  EXPECT_EQ(now[0].inner.size(), original.size()) << "wraps the runtime's code, not the first wrapper";
  EXPECT_FALSE(unwrap_device_program(now[0].inner)) << "chain depth 1";
  EXPECT_EQ(open_errno("nvidia1"), ENXIO);
  EXPECT_TRUE(denied("nvidia0")) << "no longer wanted";
  expect_spec_kept();

  // A second revocation: a reload attaches the same spec again beside our wrapper (whose
  // original was its previous program). It gets a wrapper of its own (a copy that was not
  // attached here), and the older wrapper, now a duplicate, is detached: no pile-up.
  const std::uint32_t before_id = query()[0].id;
  const std::uint32_t reload_id = attach_foreign("sd_devices", kSpec);
  ASSERT_TRUE(denied("nvidia1"));
  auto third = repair_device_programs(dir_, desired2);
  ASSERT_TRUE(third.ok()) << third.error().message;
  ASSERT_EQ(third->replaced.size(), 1u);
  EXPECT_EQ(third->replaced[0].old_id, reload_id);
  EXPECT_EQ(third->detached, 1u);
  now = query();
  ASSERT_EQ(now.size(), 1u) << "one wrapper, as before the reload";
  EXPECT_TRUE(now[0].wrapper);
  EXPECT_NE(now[0].id, reload_id);
  EXPECT_NE(now[0].id, before_id) << "the wrapper that stays is the one just attached";
  EXPECT_FALSE(unwrap_device_program(now[0].inner));
  EXPECT_EQ(open_errno("nvidia1"), ENXIO);
  expect_spec_kept();
  // A reload's program that differs from what the wrapper runs is wrapped as before.
  attach_foreign("sd_devices", kNarrowerSpec);
  ASSERT_TRUE(denied("nvidia1"));
  auto fourth = repair_device_programs(dir_, desired2);
  ASSERT_TRUE(fourth.ok()) << fourth.error().message;
  EXPECT_EQ(fourth->replaced.size(), 1u);
  EXPECT_EQ(query().size(), 2u);
  EXPECT_EQ(open_errno("nvidia1"), ENXIO);
}

// runc (1.1) re-applying while more than one program is attached records them, attaches
// its new program, then detaches the recorded ones. A repair that runs in between (runc's
// attach woke the daemon) must not leave the cgroup relying on a program runc is about to
// detach: afterwards the spec is still enforced and the GPU still granted. The daemon's
// wrappers are cached (device_program_cache.h), so the one it attached before is exactly
// such a recorded program.
TEST_F(DeviceProgramsV2, ARepairBetweenARuncAttachAndItsDetachesLeavesTheSpecEnforced) {
  DeviceProgramCache cache;
  const std::vector<WantedDevice> desired{wanted(195, 0, kAccessReadWrite, "nvidia0")};
  attach_foreign("", kSpec);
  ASSERT_TRUE(repair_device_programs(dir_, desired, cache).ok());  // our wrapper around the spec
  const OciDeviceCgroupRule allow_everything{true, DeviceRule{DeviceType::kAll, kAnyNumber, kAnyNumber, kAccessAll}};
  attach_foreign("agent", {allow_everything});  // another program: runc now detaches instead of replacing
  ASSERT_EQ(query().size(), 2u);

  // runc: records what is attached, attaches its spec's program...
  std::vector<int> recorded;
  for (const auto& p : query()) recorded.push_back(bpf_prog_get_fd_by_id(p.id));
  const std::uint32_t runc_id = attach_foreign("", kSpec);
  ASSERT_TRUE(denied("nvidia0"));
  // ...the daemon repairs in between...
  auto repair = repair_device_programs(dir_, desired, cache);
  ASSERT_TRUE(repair.ok()) << repair.error().message;
  EXPECT_EQ(open_errno("nvidia0"), ENXIO);
  // ...and runc detaches what it recorded.
  int cgroup = ::open(dir_.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  for (int fd : recorded) {
    (void)bpf_prog_detach2(fd, cgroup, BPF_CGROUP_DEVICE);  // ENOENT for what the repair took away
    ::close(fd);
  }
  ::close(cgroup);

  auto now = query();
  ASSERT_EQ(now.size(), 1u) << "the wrapper of runc's program, nothing else";
  EXPECT_TRUE(now[0].wrapper);
  EXPECT_EQ(count_of(now, runc_id), 0u);
  expect_spec_kept();
  EXPECT_TRUE(denied("nvidia1"));
  EXPECT_EQ(open_errno("nvidia0"), ENXIO);
}

// systemd's and runc's programs for the same spec, side by side (runc attached while
// systemd's was there), and a repair working from a look taken just before runc detached
// the program it had recorded (systemd's). The repair wraps one and detaches its twin; the
// twin must only go once the wrapper is in, or the cgroup is left with no program at all:
// every device allowed. Replayed here with the look handed to the repair by hand.
TEST_F(DeviceProgramsV2, ARepairFromALookARuncDetachOvertookNeverLeavesTheCgroupWithoutPrograms) {
  DeviceProgramCache cache;
  const std::vector<WantedDevice> desired{wanted(195, 0, kAccessReadWrite, "nvidia0")};
  const std::uint32_t systemd_id = attach_foreign("sd_devices", kSpec);
  attach_foreign("", kSpec);  // runc's, the same instructions
  auto look = snapshot_device_programs(dir_, cache);
  ASSERT_TRUE(look.ok()) << look.error().message;
  ASSERT_EQ(look->all().size(), 2u);

  int cgroup = ::open(dir_.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  int recorded = bpf_prog_get_fd_by_id(systemd_id);
  ASSERT_EQ(bpf_prog_detach2(recorded, cgroup, BPF_CGROUP_DEVICE), 0) << std::strerror(errno);  // runc's detach
  ::close(recorded);
  ::close(cgroup);

  auto repair = repair_device_programs(dir_, desired, cache, &*look);
  ASSERT_TRUE(repair.ok()) << repair.error().message;
  auto now = query();
  ASSERT_EQ(now.size(), 1u) << "the wrapper of runc's program";
  EXPECT_TRUE(now[0].wrapper);
  EXPECT_EQ(open_errno("nvidia0"), ENXIO);
  EXPECT_TRUE(denied("nvidia1")) << "the cgroup still restricts";
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
  auto repair = repair_device_programs(dir_, desired);
  ASSERT_TRUE(repair.ok()) << repair.error().message;
  EXPECT_TRUE(repair->replaced.empty());
  ASSERT_EQ(repair->left_attached.size(), 1u);
  EXPECT_EQ(repair->left_attached[0].program.id, runtime.id);
  EXPECT_NE(repair->left_attached[0].reason.find("bpf_link"), std::string::npos) << repair->left_attached[0].reason;
  EXPECT_EQ(repair->still_denied, desired);
  EXPECT_EQ(query().size(), 1u);
  EXPECT_TRUE(denied("nvidia0"));
  expect_spec_kept();
  ::close(link);
}

// A cgroup in single-program mode (an old runtime attached without BPF_F_ALLOW_MULTI): the
// one program is swapped atomically by an attach with the same flags.
TEST_F(DeviceProgramsV2, ASingleModeProgramIsSwappedAtomically) {
  const std::uint32_t legacy_id = attach_foreign("", kSpec, 0);
  auto repair = repair_device_programs(dir_, {wanted(195, 0, kAccessReadWrite, "nvidia0")});
  ASSERT_TRUE(repair.ok()) << repair.error().message;
  ASSERT_EQ(repair->replaced.size(), 1u);
  EXPECT_EQ(repair->replaced[0].old_id, legacy_id);
  EXPECT_EQ(ids_of(query()), std::vector<std::uint32_t>{repair->replaced[0].new_id});
  EXPECT_EQ(open_errno("nvidia0"), ENXIO);
  expect_spec_kept();
}

TEST_F(DeviceProgramsV2, MissingCgroupIsAnErrorNamingIt) {
  const std::string gone = sandbox_->path("no-such-container");
  auto programs = query_device_programs(gone);
  ASSERT_FALSE(programs.ok());
  EXPECT_NE(programs.error().message.find(gone), std::string::npos) << programs.error().message;
  auto repair = repair_device_programs(gone, {});
  ASSERT_FALSE(repair.ok());
  EXPECT_NE(repair.error().message.find(gone), std::string::npos) << repair.error().message;
}

// The kernel and the interpreter agree: on random rule lists (assembled independently of
// the daemon), the interpreter's verdict on the kernel's translated instructions equals
// the kernel's own (open() from inside), and after wrapping, the kernel allows exactly
// the wanted devices plus what the original allowed.
TEST_F(DeviceProgramsV2, InterpreterAndWrapperAgreeWithTheKernelOnRandomRuleLists) {
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
  for (int round = 0; round < 12; ++round) {
    std::vector<OciDeviceCgroupRule> rules{
        {next(2) == 1, DeviceRule{DeviceType::kAll, kAnyNumber, kAnyNumber, kAccessAll}}};
    for (std::uint32_t i = 0, n = 1 + next(6); i < n; ++i)
      rules.push_back({next(2) == 1, DeviceRule{types[next(3)], majors[next(4)], minors[next(4)],
                                                static_cast<std::uint8_t>(1 + next(7))}});
    for (const auto& p : query()) {  // a fresh cgroup state each round
      int cg = ::open(dir_.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
      int fd = bpf_prog_get_fd_by_id(p.id);
      ASSERT_EQ(bpf_prog_detach2(fd, cg, BPF_CGROUP_DEVICE), 0);
      ::close(fd);
      ::close(cg);
    }
    attach_foreign("", rules);
    const auto attached = query();
    ASSERT_EQ(attached.size(), 1u);
    for (const auto& node : nodes)
      for (const auto& [flags, access] : modes) {
        const bool kernel = !denied(node.name, flags);
        ++(kernel ? allowed : refused);
        EXPECT_EQ(run_device_program(attached[0].code, node.dev, access), kernel ? Verdict::kAllow : Verdict::kDeny)
            << "round " << round << ", " << node.name << " " << format_access(access);
      }
    const WantedDevice want{nodes[next(nodes.size())].dev, static_cast<std::uint8_t>(2 + 2 * next(2)), "w", ""};
    auto repair = repair_device_programs(dir_, {want});
    ASSERT_TRUE(repair.ok()) << repair.error().message;
    for (const auto& node : nodes)
      for (const auto& [flags, access] : modes) {
        const bool added = node.dev == want.dev && (access & ~want.access) == 0;
        EXPECT_EQ(!denied(node.name, flags), added || oci_rules_allow(rules, node.dev, access))
            << "round " << round << ", " << node.name << " with access " << format_access(access);
      }
  }
  EXPECT_GT(allowed, 30) << "the rule lists must exercise both verdicts";
  EXPECT_GT(refused, 30);
}

// How long a repair takes (read, load, BPF_F_REPLACE), and that repeated revocations never
// pile up programs of ours.
TEST_F(DeviceProgramsV2, RepeatedRepairsTakeMillisecondsAndNeverAddPrograms) {
  using Clock = std::chrono::steady_clock;
  attach_foreign("", kSpec);
  std::vector<long> us;
  for (int i = 0; i < 20; ++i) {
    const std::size_t before = query().size();
    const auto start = Clock::now();
    auto repair = repair_device_programs(dir_, {wanted(195, static_cast<std::uint32_t>(i % 2), kAccessReadWrite, "gpu")});
    us.push_back(std::chrono::duration_cast<std::chrono::microseconds>(Clock::now() - start).count());
    ASSERT_TRUE(repair.ok()) << repair.error().message;
    ASSERT_EQ(repair->replaced.size(), 1u);
    ASSERT_EQ(query().size(), before);
  }
  std::sort(us.begin(), us.end());
  std::cout << "repair_device_programs (re-wrap, " << us.size() << " runs): median " << us[us.size() / 2]
            << " us, max " << us.back() << " us\n";
  expect_spec_kept();
}

}  // namespace
}  // namespace gdw::test
