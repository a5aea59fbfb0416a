// The probe focused on what a node's device policy is made of (Probe::focus): each always-on
// hook runs on system calls that have nothing to do with GPUs (the capability hook on every
// mmap of writable memory, the attach hook on every kmalloc), so a v2 node must run nothing
// of ours on its capability checks and a v1 node nothing on its kmallocs, while what that
// node's policy needs is still seen. Proven with the kernel's own run counts of the probe's
// programs (BPF_ENABLE_STATS, held only during the test) and with the records that come.
#include <bpf/bpf.h>
#include <fcntl.h>
#include <linux/bpf.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <memory>
#include <optional>
#include <string>

#include <gtest/gtest.h>

#include "probe/probe.h"
#include "support/cgroup_sandbox.h"
#include "support/device_program_tools.h"
#include "support/foreign_device_program.h"
#include "support/probe_event_log.h"
#include "support/probe_fixture.h"
#include "support/process.h"

namespace gdw {
namespace {

using test::CgroupSandbox;
using test::EventLog;
using test::inode_of;

// How often the kernel ran this process's probe program `name` (truncated as the kernel
// keeps names, 15 characters) since statistics were first enabled: from its descriptor
// in this process, so another probe on the same kernel does not count.
std::optional<std::uint64_t> own_program_runs(const std::string& name) {
  const std::string kept = name.substr(0, BPF_OBJ_NAME_LEN - 1);
  for (const auto& entry : std::filesystem::directory_iterator("/proc/self/fd")) {
    std::error_code ec;
    if (std::filesystem::read_symlink(entry.path(), ec).string() != "anon_inode:bpf-prog") continue;
    const int fd = std::stoi(entry.path().filename().string());
    bpf_prog_info info{};
    std::uint32_t length = sizeof(info);
    if (bpf_obj_get_info_by_fd(fd, &info, &length) == 0 && kept == info.name) return info.run_cnt;
  }
  return std::nullopt;
}

void map_private_pages(int times) {
  for (int i = 0; i < times; ++i) {
    void* page = ::mmap(nullptr, 4096, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    ASSERT_NE(page, MAP_FAILED) << std::strerror(errno);
    static_cast<volatile char*>(page)[0] = 1;
    ::munmap(page, 4096);
  }
}

// Each read of a /proc seq file kmallocs its buffer.
void read_proc_stat(int times) {
  for (int i = 0; i < times; ++i) (void)test::read_file("/proc/self/stat");
}

// A device program that allows everything, as a runtime would load it.
test::ForeignProgram allow_all_program() { return test::ForeignProgram("gdw_focus_allow", test::kAllowAllRules); }

class ProbeFocusTest : public ::testing::Test {
 protected:
  virtual ProbeOptions options() const { return {}; }

  void SetUp() override {
    if (!test::is_root()) GTEST_SKIP() << "needs root: loads BPF programs and creates cgroups";
    if (!CgroupSandbox::available("unified")) GTEST_SKIP() << "no writable cgroup2 at /sys/fs/cgroup/unified";
    auto loaded = Probe::load(options());
    ASSERT_TRUE(loaded) << loaded.error().message;
    probe_ = std::move(*loaded);
    log_.emplace(*probe_);
    stats_fd_ = bpf_enable_stats(BPF_STATS_RUN_TIME);
    ASSERT_GE(stats_fd_, 0) << "BPF_ENABLE_STATS: " << std::strerror(errno);
    v2_.emplace("unified", "probe-focus");
    v2_dir_ = v2_->make("container");
    v2_id_ = inode_of(v2_dir_);
    ASSERT_TRUE(probe_->watch_program_cgroup(v2_id_));
  }
  void TearDown() override {
    if (stats_fd_ >= 0) ::close(stats_fd_);
  }

  // Runs of program `name` while `work` runs.
  template <class Work>
  std::uint64_t runs_during(const std::string& name, Work work) {
    auto before = own_program_runs(name);
    work();
    auto after = own_program_runs(name);
    EXPECT_TRUE(before && after) << name << " is not loaded in this process";
    return before && after ? *after - *before : 0;
  }

  // Loads and attaches a device program to the watched v2 cgroup; whether the probe
  // reports the attach as the kernel installs it.
  bool attach_is_reported() {
    const auto prog = allow_all_program();
    EXPECT_GE(prog.fd, 0) << std::strerror(prog.load_errno);
    EXPECT_EQ(prog.attach(v2_dir_), 0);
    auto seen = log_->wait_for<DeviceProgramEvent>(
        [&](const DeviceProgramEvent& e) {
          return e.caller.pid == ::getpid() && e.attaching && e.target_cgroup_id == v2_id_;
        },
        std::chrono::milliseconds(500));
    const int dir = ::open(v2_dir_.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    (void)bpf_prog_detach2(prog.fd, dir, BPF_CGROUP_DEVICE);
    ::close(dir);
    return seen.has_value();
  }

  // Writes a deny rule to a v1 devices cgroup of this run; whether the probe names the
  // writer (this process). nullopt: no v1 devices hierarchy here.
  std::optional<bool> rule_write_is_reported() {
    if (!CgroupSandbox::available("devices")) return std::nullopt;
    CgroupSandbox v1("devices", "probe-focus");
    const std::string dir = v1.make("container");
    const std::uint64_t id = inode_of(dir);
    EXPECT_EQ(v1.deny("container", "c 195:0 rwm"), 0);
    auto seen = log_->wait_for<RuleWriteEvent>(
        [&](const RuleWriteEvent& e) { return e.writer.pid == ::getpid() && e.target_cgroup_id == id; },
        std::chrono::milliseconds(500));
    return seen.has_value();
  }

  std::unique_ptr<Probe> probe_;
  std::optional<EventLog> log_;
  int stats_fd_ = -1;
  std::optional<CgroupSandbox> v2_;
  std::string v2_dir_;
  std::uint64_t v2_id_ = 0;
};

TEST_F(ProbeFocusTest, AsLoadedBothHooksRun) {
  EXPECT_TRUE(probe_->capability_hook());
  ASSERT_TRUE(probe_->attach_hook()) << probe_->attach_hook_choice().describe();
  EXPECT_GE(runs_during("gdw_cap_check", [] { map_private_pages(200); }), 200u);
  EXPECT_GT(runs_during("gdw_effective_progs", [] { read_proc_stat(50); }), 0u);
}

TEST_F(ProbeFocusTest, OnACgroupV2NodeNothingOfOursRunsOnCapabilityChecks) {
  ASSERT_TRUE(probe_->focus(DevicePolicyForm::kPrograms));
  EXPECT_FALSE(probe_->capability_hook());
  ASSERT_TRUE(probe_->attach_hook()) << probe_->attach_hook_choice().describe();
  EXPECT_EQ(runs_during("gdw_cap_check", [] { map_private_pages(500); }), 0u);
  EXPECT_GT(runs_during("gdw_effective_progs", [] { read_proc_stat(50); }), 0u);
  EXPECT_TRUE(attach_is_reported()) << "what a v2 node's repairs start from";
  // The trade: a v1 rule write goes unnamed (no v1 device policy is watched here).
  EXPECT_NE(rule_write_is_reported(), std::optional<bool>(true));
}

TEST_F(ProbeFocusTest, OnACgroupV1NodeNothingOfOursRunsOnKmallocs) {
  ASSERT_TRUE(probe_->focus(DevicePolicyForm::kRuleFiles));
  EXPECT_TRUE(probe_->capability_hook());
  EXPECT_FALSE(probe_->attach_hook());
  EXPECT_EQ(runs_during("gdw_effective_progs", [] { read_proc_stat(200); }), 0u);
  auto named = rule_write_is_reported();
  if (!named) GTEST_SKIP() << "no v1 devices hierarchy here";
  EXPECT_TRUE(*named) << "what a v1 node's attribution starts from";
  EXPECT_FALSE(attach_is_reported());
  // Loads are not reported either: nothing on a v1 node reads them.
  ASSERT_GE(allow_all_program().fd, 0);
  EXPECT_FALSE(log_->wait_for<DeviceProgramLoadEvent>(
      [](const DeviceProgramLoadEvent& e) { return e.caller.pid == ::getpid(); }, std::chrono::milliseconds(300)));
}

TEST_F(ProbeFocusTest, FocusedAgainTheHooksComeBack) {
  ASSERT_TRUE(probe_->focus(DevicePolicyForm::kRuleFiles));
  ASSERT_TRUE(probe_->focus(DevicePolicyForm::kPrograms));
  ASSERT_TRUE(probe_->attach_hook()) << probe_->attach_hook_choice().describe();
  EXPECT_TRUE(attach_is_reported());
  ASSERT_TRUE(probe_->focus(DevicePolicyForm::kUnknown));
  EXPECT_TRUE(probe_->capability_hook());
  EXPECT_TRUE(probe_->attach_hook());
  EXPECT_GE(runs_during("gdw_cap_check", [] { map_private_pages(200); }), 200u);
}

// Focused on programs, the attach hook's load point (a tenant's load ahead of its attach):
// privileged_probe_device_programs_test, for each kind.

// A kernel that refuses the attach hook (or probe.attach_hook: false): on a v2 node the
// capability hook stays, for the program loads that are then what is seen.
class ProbeFocusWithoutAttachHookTest : public ProbeFocusTest {
 protected:
  ProbeOptions options() const override { return {.attach_hook = false}; }
};

TEST_F(ProbeFocusWithoutAttachHookTest, OnACgroupV2NodeProgramLoadsAreSeenAtTheirCapabilityCheck) {
  ASSERT_TRUE(probe_->focus(DevicePolicyForm::kPrograms));
  EXPECT_FALSE(probe_->attach_hook());
  EXPECT_TRUE(probe_->capability_hook());
  ASSERT_GE(allow_all_program().fd, 0);
  EXPECT_TRUE(log_->wait_for<DeviceProgramLoadEvent>(
      [](const DeviceProgramLoadEvent& e) { return e.caller.pid == ::getpid(); }));
}

}  // namespace
}  // namespace gdw
