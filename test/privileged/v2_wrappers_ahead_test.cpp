// cgroup v2, the daemon on the real kernel: after the first repair that meets a program
// (systemd's after a daemon-reload, the same spec in every container), the wrappers of
// that program for the other GPU containers' device sets are loaded ahead, so that their
// repairs run no verifier while their tenants wait; and each of them still gets its own
// devices and nobody else's. And a container re-applied more often than the cache keeps
// copies of its wrapper (kMaxCopies within kReuseAfter) finds the copy it needs loaded
// after the repair before.
#include <gtest/gtest.h>

#include <cerrno>
#include <chrono>

#include "backend/device_program_cache.h"
#include "support/daemon_harness.h"

namespace gdw::test {
namespace {

class V2WrappersAhead : public ::testing::Test {
 protected:
  void SetUp() override {
    if (auto why = SandboxNode::v2_unavailable_reason(); !why.empty()) GTEST_SKIP() << why;
    node_ = std::make_unique<SandboxNode>(SandboxNode::Options{.gpus = 3, .v2 = true});
    for (int gpu = 0; gpu < 3; ++gpu)
      gpus_.push_back(&node_->add_container({.pod_namespace = "ml", .pod_name = "trainer-" + std::to_string(gpu),
                                             .container_name = "trainer", .device_ids = {node_->gpu_uuid(gpu)}}));
    plain_ = &node_->add_container({.pod_namespace = "web", .pod_name = "front", .container_name = "nginx"});
    node_->write_checkpoint();
  }
  double loaded(const DaemonHarness& daemon, const std::string& when) const {
    return daemon.metric("gpu_devwatch_device_programs_loaded_total", {{"when", when}});
  }

  std::unique_ptr<SandboxNode> node_;
  std::vector<const SandboxContainer*> gpus_;
  const SandboxContainer* plain_ = nullptr;
};

TEST_F(V2WrappersAhead, OneVerifierRunOnARepairsPathForAReloadThatReachesEveryGpuContainer) {
  DaemonHarness daemon(*node_);
  ASSERT_TRUE(daemon.start("", /*probe=*/true)) << daemon.output();
  if (daemon.metric("gpu_devwatch_probe_loaded") != 1) GTEST_SKIP() << "probe not loadable:\n" << daemon.output();
  for (const auto* c : gpus_) ASSERT_TRUE(daemon.eventually_errno(*c, "nvidia0", c == gpus_[0] ? ENXIO : EPERM));
  EXPECT_EQ(loaded(daemon, "repair"), 0) << "nothing repaired yet";
  EXPECT_EQ(loaded(daemon, "ahead"), 0) << "nothing loaded before a program is met";

  node_->reapply_spec(*gpus_[0]);  // systemd's reload reaches the first container
  ASSERT_TRUE(daemon.eventually_errno(*gpus_[0], "nvidia0", ENXIO)) << daemon.output();
  // The repair is counted after the grant the tenant already sees: waited for.
  const auto regrants = [&] {
    return daemon.metric("gpu_devwatch_regrants_total", {{"method", "bpf"}, {"result", "success"}});
  };
  ASSERT_TRUE(eventually([&] { return regrants() >= 3; })) << "the GPU and the control nodes\n" << daemon.metrics();
  const double first_regrants = regrants();  // one repair counts its devices at once
  EXPECT_TRUE(eventually([&] { return loaded(daemon, "repair") == 1; }))
      << "the first repair that meets systemd's program loads its wrapper\n" << daemon.metrics();
  // Then, after the grant: the wrappers for the two other GPUs' containers (and a spare
  // copy of the first). The container without devices wants none.
  EXPECT_TRUE(eventually([&] { return loaded(daemon, "ahead") == 3; })) << daemon.metrics();

  for (std::size_t i = 1; i < gpus_.size(); ++i) {
    const auto& c = *gpus_[i];
    const std::string own = "nvidia" + std::to_string(i);
    node_->reapply_spec(c);
    ASSERT_TRUE(daemon.eventually_errno(c, own, ENXIO)) << daemon.output();
    ASSERT_TRUE(eventually([&] { return regrants() == static_cast<double>(i + 1) * first_regrants; }))
        << "each container gets as many devices back as the first\n" << daemon.metrics();
    EXPECT_EQ(node_->open_errno(c, "nvidia-uvm"), ENXIO);
    // A wrapper loaded ahead adds that container's own set, not the first one's.
    EXPECT_EQ(node_->open_errno(c, "nvidia0"), EPERM) << own << "'s container was given GPU 0";
    EXPECT_EQ(node_->open_errno(c, "nvidia" + std::to_string(3 - i)), EPERM);
  }
  EXPECT_EQ(loaded(daemon, "repair"), 1) << "the other repairs found their wrappers loaded";
  EXPECT_EQ(node_->open_errno(*plain_, "nvidia0"), EPERM) << "the container without devices got none";
}

TEST_F(V2WrappersAhead, AContainerReappliedOnAndOnRunsNoVerifierOnItsRepairs) {
  DaemonHarness daemon(*node_);
  ASSERT_TRUE(daemon.start("", /*probe=*/true)) << daemon.output();
  if (daemon.metric("gpu_devwatch_probe_loaded") != 1) GTEST_SKIP() << "probe not loadable:\n" << daemon.output();
  const auto& c = *gpus_[0];
  ASSERT_TRUE(daemon.eventually_errno(c, "nvidia0", ENXIO)) << daemon.output();
  const auto regrants = [&] {
    return daemon.metric("gpu_devwatch_regrants_total", {{"method", "bpf"}, {"result", "success"}});
  };
  // Past the first repair (it meets the spec's program: its wrapper on its path), each
  // needs a copy of that wrapper not in the cgroup within kReuseAfter: a spare up to
  // kMaxCopies, then one-shot copies, each loaded after the repair before. The loop runs
  // well within kReuseAfter; slower (a loaded machine), kept copies come free again and
  // fewer are loaded, none on a repair's path either way.
  const int reapplies = static_cast<int>(DeviceProgramCache::kMaxCopies) + 4;
  const auto start = std::chrono::steady_clock::now();
  for (int i = 0; i <= reapplies; ++i) {
    const double regrants_before = regrants();
    const double ahead_before = loaded(daemon, "ahead");
    node_->reapply_spec(c);
    ASSERT_TRUE(daemon.eventually_errno(c, "nvidia0", ENXIO)) << "re-apply " << i << "\n" << daemon.output();
    ASSERT_TRUE(eventually([&] { return regrants() > regrants_before; })) << daemon.metrics();
    // What the repair asked to load ahead, loaded before the next re-apply comes: after the
    // first, its spare and the two other GPUs' wrappers (in two turns, as above); after each
    // later one, one copy.
    const double ahead_due = i == 0 ? 3 : ahead_before + 1;
    (void)eventually([&] { return loaded(daemon, "ahead") >= ahead_due; }, std::chrono::seconds(1));
  }
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  EXPECT_EQ(loaded(daemon, "repair"), 1) << "a verifier run on a later repair's path (" << reapplies
                                         << " re-applies in " << seconds << " s)\n" << daemon.metrics();
  EXPECT_EQ(node_->open_errno(c, "nvidia1"), EPERM) << "not the container's";
}

}  // namespace
}  // namespace gdw::test
