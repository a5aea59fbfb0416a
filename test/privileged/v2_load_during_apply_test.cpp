// cgroup v2, the daemon on the real kernel: a runtime that attaches a program the daemon has
// never met to a GPU container, and goes on applying, has the wrapper the grant will need
// loaded meanwhile, on a thread of the daemon's, and not attached: the cgroup keeps exactly
// the runtime's programs until it exits (runc reads them back). After its exit the grant
// attaches that very wrapper, with no verifier run on the repair's path. And a runtime whose
// program allows the GPU already has nothing loaded for it.
#include <gtest/gtest.h>
#include <linux/bpf.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <set>

#include "backend/device_programs_v2.h"
#include "support/apply_wait_checks.h"
#include "support/daemon_harness.h"
#include "support/device_program_tools.h"

namespace gdw::test {
namespace {

using namespace std::chrono_literals;

class V2LoadDuringApply : public ::testing::Test {
 protected:
  void SetUp() override {
    if (auto why = SandboxNode::v2_unavailable_reason(); !why.empty()) GTEST_SKIP() << why;
    node_ = std::make_unique<SandboxNode>(SandboxNode::Options{.gpus = 2, .v2 = true});
    gpu_ = &add_gpu_container(*node_);
    daemon_ = std::make_unique<DaemonHarness>(*node_);
    ASSERT_TRUE(daemon_->start("", /*probe=*/true)) << daemon_->output();
    if (daemon_->metric("gpu_devwatch_probe_loaded") != 1)
      GTEST_SKIP() << "the eBPF probe could not load here:\n" << daemon_->output();
    ASSERT_TRUE(daemon_->eventually_errno(*gpu_, "nvidia0", ENXIO)) << daemon_->output();
  }
  double loaded(const char* when) const {
    return daemon_->metric("gpu_devwatch_device_programs_loaded_total", {{"when", when}});
  }
  // Our wrappers loaded in the kernel (any daemon's, attached or not).
  static std::set<std::uint32_t> wrappers() {
    return loaded_program_ids(BPF_PROG_TYPE_CGROUP_DEVICE, kOurProgramName);
  }
  std::set<std::uint32_t> attached() const {
    std::set<std::uint32_t> ids;
    for (const auto& p : attached_device_programs(gpu_->cgroup_dir)) ids.insert(p.id);
    return ids;
  }

  std::unique_ptr<SandboxNode> node_;
  const SandboxContainer* gpu_ = nullptr;
  std::unique_ptr<DaemonHarness> daemon_;
};

TEST_F(V2LoadDuringApply, TheWrapperForARuntimesNewProgramIsLoadedWhileItAppliesAndAttachedOnlyAfterItExits) {
  EXPECT_EQ(loaded("repair"), 0);
  EXPECT_EQ(loaded("ahead"), 0) << "no program met yet";
  const std::set<std::uint32_t> before = wrappers();

  const pid_t runtime = node_->start_lingering_reapply(*gpu_, "runc");
  ASSERT_EQ(node_->open_errno(*gpu_, "nvidia0"), EPERM) << "the re-apply took the GPU";
  const std::set<std::uint32_t> runtimes = attached();
  const auto new_wrappers = [&] {
    std::set<std::uint32_t> fresh;
    for (auto id : wrappers())
      if (!before.contains(id)) fresh.insert(id);
    return fresh;
  };
  ASSERT_TRUE(eventually([&] { return !new_wrappers().empty(); }))
      << "no wrapper loaded while the runtime applies\n" << daemon_->output();
  // Loaded, not attached: what runc reads back is what it attached.
  ASSERT_TRUE(stays_denied(*node_, *gpu_, *daemon_, 200ms, "runc"));
  EXPECT_EQ(attached(), runtimes) << "the cgroup's programs changed inside the runtime's apply";
  EXPECT_EQ(loaded("repair"), 0);
  // Every wrapper loaded on the node during the apply (other tests' daemons may load some).
  const std::set<std::uint32_t> during = new_wrappers();

  node_->finish_lingering(runtime);
  expect_granted_after_writer_exit(*node_, *gpu_, *daemon_, "runc");
  std::vector<std::uint32_t> ours;
  for (const auto& p : attached_device_programs(gpu_->cgroup_dir))
    if (p.name == kOurProgramName) ours.push_back(p.id);
  ASSERT_EQ(ours.size(), 1u) << describe(attached_device_programs(gpu_->cgroup_dir));
  EXPECT_TRUE(during.contains(ours[0])) << "the grant attached wrapper " << ours[0]
                                        << ", not one loaded during the apply";
  EXPECT_EQ(loaded("repair"), 0) << "a verifier run on the repair's path\n" << daemon_->metrics();
  // Counted once taken in (the grant took it): the one loaded during the apply, and the
  // spare copy loaded after the grant.
  EXPECT_TRUE(eventually([&] { return loaded("ahead") >= 1; })) << daemon_->metrics();
}

TEST_F(V2LoadDuringApply, ARuntimesProgramThatAllowsTheGpuHasNothingLoadedForIt) {
  // A runc that re-applies a spec allowing every device, and goes on applying: it denies
  // nothing wanted, and the daemon waits for its exit all the same.
  const double read_before = probe_records_read(*daemon_);
  const pid_t runtime =
      node_->start_lingering_as("runc", [&] { return runc_style_reapply(gpu_->cgroup_dir, kAllowAllRules); });
  const auto until = std::chrono::steady_clock::now() + 200ms;
  while (std::chrono::steady_clock::now() < until) ASSERT_EQ(node_->open_errno(*gpu_, "nvidia0"), ENXIO);
  ASSERT_TRUE(reads_past(*daemon_, read_before)) << "the runtime must still run when its attach is read";
  node_->finish_lingering(runtime);
  ASSERT_TRUE(eventually([&] {
    return daemon_->metric("gpu_devwatch_apply_waits_total", {{"until", "writer_exit"}}) >= 1;
  })) << "the daemon did not wait for the runtime\n" << daemon_->metrics();
  // A load made during the wait is counted once the wait has ended.
  EXPECT_EQ(loaded("ahead"), 0) << "a wrapper was loaded for a program that takes nothing away";
  EXPECT_EQ(loaded("repair"), 0);
  EXPECT_EQ(node_->open_errno(*gpu_, "nvidia0"), ENXIO);
}

}  // namespace
}  // namespace gdw::test
