// cgroup v2 with the probe's attach hook, the daemon on the real kernel: a device program
// load by a process inside a GPU container (a tenant re-applying its own policy) has the
// daemon look at that container while the verifier runs, before the attach that may follow,
// so that the repair after the attach runs on warm caches. Not where the daemon's loop runs
// on the loader's CPU (the look would take it from the verifier); not for a load anywhere
// else; one look per 10 ms at most however often a tenant loads; and the repair after a
// look still gives the container its devices and nothing more. The daemon's event loop is
// pinned to one CPU, each loader to that one or another.
#include <gtest/gtest.h>
#include <sched.h>

#include <cerrno>
#include <chrono>
#include <thread>

#include "support/apply_wait_checks.h"
#include "support/daemon_harness.h"
#include "support/device_program_tools.h"

namespace gdw::test {
namespace {

using namespace std::chrono_literals;

// The probe reports a load at most once a millisecond node-wide, and the daemon looks
// ahead once per 10 ms: loads this far apart are each reported and each may be looked at.
constexpr auto kBetweenLoads = 20ms;

class V2LookAhead : public ::testing::Test {
 protected:
  void SetUp() override {
    if (auto why = SandboxNode::v2_unavailable_reason(); !why.empty()) GTEST_SKIP() << why;
    node_ = std::make_unique<SandboxNode>(SandboxNode::Options{.gpus = 2, .v2 = true});
    gpu_ = &node_->add_container({.pod_namespace = "ml", .pod_name = "trainer", .container_name = "trainer",
                                  .device_ids = {node_->gpu_uuid(0)}});
    plain_ = &node_->add_container({.pod_namespace = "web", .pod_name = "front", .container_name = "nginx"});
    node_->write_checkpoint();
    cpu_set_t mine;
    ASSERT_EQ(::sched_getaffinity(0, sizeof mine, &mine), 0);
    for (int cpu = 0; cpu < CPU_SETSIZE && other_cpu_ < 0; ++cpu)
      if (CPU_ISSET(cpu, &mine)) (loop_cpu_ < 0 ? loop_cpu_ : other_cpu_) = cpu;
    if (other_cpu_ < 0) GTEST_SKIP() << "one CPU only: every load is on the loop's CPU";
    daemon_ = std::make_unique<DaemonHarness>(*node_);
    ASSERT_TRUE(daemon_->start("", /*probe=*/true)) << daemon_->output();
    if (daemon_->metric("gpu_devwatch_probe_loaded") != 1)
      GTEST_SKIP() << "the eBPF probe could not load here:\n" << daemon_->output();
    cpu_set_t one;
    CPU_ZERO(&one);
    CPU_SET(loop_cpu_, &one);
    ASSERT_EQ(::sched_setaffinity(daemon_->process().pid(), sizeof one, &one), 0) << "the event loop thread";
    ASSERT_TRUE(daemon_->eventually_errno(*gpu_, "nvidia0", ENXIO)) << daemon_->output();
    bool hooked = false;
    for (const char* kind : {"lsm", "fexit", "kmalloc"})
      hooked |= daemon_->metric("gpu_devwatch_probe_attach_hook_attached", {{"kind", kind}}) == 1;
    if (!hooked) GTEST_SKIP() << "no attach hook on this kernel:\n" << daemon_->output();
  }
  // A tenant's load of a program inside `c` on `cpu` (`extra` loads before it), never attached.
  static int load_inside(const SandboxContainer& c, int cpu, int extra = 0) {
    return attach_as("tenant", c.cgroup_dir, kAllowAllRules,
                     {.from_inside = true, .extra_loads = extra, .then_attach = false, .cpu = cpu});
  }
  double looks(const char* outcome) const {
    return daemon_->metric("gpu_devwatch_looks_ahead_total", {{"outcome", outcome}});
  }

  std::unique_ptr<SandboxNode> node_;
  const SandboxContainer* gpu_ = nullptr;
  const SandboxContainer* plain_ = nullptr;
  std::unique_ptr<DaemonHarness> daemon_;
  int loop_cpu_ = -1;   // the daemon's event loop runs here
  int other_cpu_ = -1;  // and not here
};

TEST_F(V2LookAhead, ALoadInsideAGpuContainerHasItLookedAtAndItsAttachIsStillRepaired) {
  EXPECT_EQ(looks("looked"), 0);
  // From this process (outside every container), then from inside the container without
  // devices: neither is a GPU container's load.
  ASSERT_EQ(attach_as("loader", gpu_->cgroup_dir, kAllowAllRules, {.then_attach = false, .cpu = other_cpu_}), 0);
  std::this_thread::sleep_for(kBetweenLoads);
  ASSERT_EQ(load_inside(*plain_, other_cpu_), 0);
  std::this_thread::sleep_for(kBetweenLoads);
  ASSERT_EQ(load_inside(*gpu_, other_cpu_), 0);
  // Records are read in order: once the third load's look is counted, the first two were
  // read and made none.
  ASSERT_TRUE(eventually([&] { return looks("looked") >= 1; })) << daemon_->metrics();
  EXPECT_EQ(looks("looked"), 1) << daemon_->metrics();
  EXPECT_EQ(looks("same_cpu") + looks("interval"), 0) << daemon_->metrics();
  EXPECT_EQ(node_->open_errno(*gpu_, "nvidia0"), ENXIO) << "a load alone takes nothing";

  // The tenant's own re-apply, its attach 20 ms after its load (the look in between): the
  // spec's program ANDed on denies the GPU, and the repair after it gives it back.
  const auto regrants = [&] {
    return daemon_->metric("gpu_devwatch_regrants_total", {{"method", "bpf"}, {"result", "success"}});
  };
  const double regrants_before = regrants();
  std::this_thread::sleep_for(kBetweenLoads);
  ASSERT_EQ(attach_as("tenant", gpu_->cgroup_dir, SandboxNode::spec_rules(),
                      {.from_inside = true, .after_load = 20ms, .cpu = other_cpu_}),
            0);
  EXPECT_TRUE(eventually([&] { return regrants() > regrants_before; })) << daemon_->metrics();
  EXPECT_TRUE(daemon_->eventually_errno(*gpu_, "nvidia0", ENXIO)) << daemon_->output();
  EXPECT_EQ(node_->open_errno(*gpu_, "nvidia-uvm"), ENXIO);
  EXPECT_EQ(node_->open_errno(*gpu_, "nvidia1"), EPERM) << "the other GPU is not the container's";
  EXPECT_EQ(looks("looked"), 2) << "its load was looked at too\n" << daemon_->metrics();
  EXPECT_EQ(node_->open_errno(*plain_, "nvidia0"), EPERM) << "the container without devices got none";
}

TEST_F(V2LookAhead, ALoadOnTheLoopsOwnCpuIsNotLookedAt) {
  ASSERT_EQ(load_inside(*gpu_, loop_cpu_), 0);
  ASSERT_TRUE(eventually([&] { return looks("same_cpu") >= 1; })) << daemon_->metrics();
  EXPECT_EQ(looks("looked"), 0) << daemon_->metrics();
  // The same tenant from the other CPU, later: looked at.
  std::this_thread::sleep_for(kBetweenLoads);
  ASSERT_EQ(load_inside(*gpu_, other_cpu_), 0);
  EXPECT_TRUE(eventually([&] { return looks("looked") >= 1; })) << daemon_->metrics();
  EXPECT_EQ(looks("same_cpu"), 1) << daemon_->metrics();
}

TEST_F(V2LookAhead, ATenantsLoadsDuringARuntimesApplyGrantNothingUntilItEnds) {
  // A runtime's re-apply (a process named runc, still running): the daemon waits for its
  // exit. A tenant inside the container loading meanwhile has it looked at, and the look
  // waits as any check does: nothing is granted inside the runtime's apply.
  const double read_before = probe_records_read(*daemon_);
  const pid_t runtime = node_->start_lingering_reapply(*gpu_, "runc");
  ASSERT_EQ(node_->open_errno(*gpu_, "nvidia0"), EPERM) << "the re-apply took the GPU";
  ASSERT_TRUE(reads_past(*daemon_, read_before));
  for (int load = 1; load <= 3; ++load) {
    ASSERT_EQ(load_inside(*gpu_, other_cpu_), 0);
    ASSERT_TRUE(eventually([&] { return looks("looked") >= load; })) << daemon_->metrics();
    ASSERT_TRUE(stays_denied(*node_, *gpu_, *daemon_, kBetweenLoads, "runc"));
  }
  EXPECT_TRUE(stays_denied(*node_, *gpu_, *daemon_, 200ms, "runc"));
  node_->finish_lingering(runtime);
  expect_granted_after_writer_exit(*node_, *gpu_, *daemon_, "runc");
}

TEST_F(V2LookAhead, ATenantLoadingInALoopGetsOneLookPerTenMillisecondsAtMost) {
  const auto start = std::chrono::steady_clock::now();
  ASSERT_EQ(load_inside(*gpu_, other_cpu_, 3000), 0);
  const auto loop_ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
  // One more load, on the loop's CPU (counted apart, as same_cpu): once it is counted,
  // every record of the loop was read.
  std::this_thread::sleep_for(kBetweenLoads);
  ASSERT_EQ(load_inside(*gpu_, loop_cpu_), 0);
  ASSERT_TRUE(eventually([&] { return looks("same_cpu") >= 1; })) << daemon_->metrics();
  const double looked = looks("looked");
  const double held = looks("interval");
  // The loop's loads reached the daemon (one a millisecond at most) more often than the
  // interval lets it look, or the test could not tell.
  ASSERT_GT(looked + held, loop_ms / 10 + 2) << "the loop of " << loop_ms << " ms reached the daemon too seldom\n"
                                             << daemon_->metrics();
  EXPECT_LE(looked, loop_ms / 10 + 1) << "over " << loop_ms << " ms\n" << daemon_->metrics();
  EXPECT_GE(looked, 1);
  EXPECT_EQ(node_->open_errno(*gpu_, "nvidia0"), ENXIO);
}

}  // namespace
}  // namespace gdw::test
