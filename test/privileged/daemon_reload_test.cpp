// SIGHUP with the node's inputs unchanged (only what a reload applies in place: log level,
// metrics, timers, Events) keeps the container table, its watches and the node model: the
// reload is a full resync, not a cold start. It must still repair, still find what changed
// while it ran, and a change of a node input must still start over.
#include <gtest/gtest.h>
#include <signal.h>

#include <cerrno>
#include <thread>

#include "support/daemon_fixture.h"

namespace gdw::test {
namespace {

using namespace std::chrono_literals;

class DaemonReload : public DaemonTest {
 protected:
  const SandboxContainer& gpu_container(const std::string& name, int gpu) {
    return node_->add_container({.pod_namespace = "ml", .pod_name = name + "-0", .container_name = name,
                                 .device_ids = {node_->gpu_uuid(gpu)}});
  }
  bool reload_with(const std::string& config, double reloads_before) {
    write_file(daemon_->config_path(), config);
    daemon_->process().signal(SIGHUP);
    return eventually([&] {
      return daemon_->metric("gpu_devwatch_config_reloads_total", {{"result", "success"}}) == reloads_before + 1;
    }, 5s);
  }
  std::size_t count(const std::string& what) {
    const std::string out = daemon_->output();
    std::size_t n = 0;
    for (auto pos = out.find(what); pos != std::string::npos; pos = out.find(what, pos + 1)) ++n;
    return n;
  }
};

TEST_F(DaemonReload, UnchangedNodeInputsKeepWatchingAndTheResyncStillLooksAtEverything) {
  const auto& trainer = gpu_container("trainer", 0);
  node_->write_checkpoint();
  ASSERT_TRUE(daemon_->start()) << daemon_->output();
  const std::string good = read_file(daemon_->config_path());
  const double watching = count("watching GPU container");
  ASSERT_EQ(watching, 1);

  // Only a timer's pace changes, and a pod appears at the same time.
  const auto& late = gpu_container("late", 1);
  node_->write_checkpoint();
  ASSERT_TRUE(reload_with(good + "daemon:\n  program_query_interval: 5s\n", 0)) << daemon_->output();
  EXPECT_TRUE(daemon_->process().wait_for_output("node inputs unchanged", 5s)) << daemon_->output();
  EXPECT_TRUE(eventually([&] { return count("watching GPU container") >= 2; }, 5s))
      << "the new pod is found (by its event or by the reload's resync)\n" << daemon_->output();
  EXPECT_EQ(count("watching GPU container"), 2u) << "the running container was kept, not re-added\n"
                                                  << daemon_->output();

  // Both still repaired: the kept watches are live and the new one's are in place.
  node_->reapply_spec(trainer);
  node_->reapply_spec(late);
  EXPECT_TRUE(daemon_->eventually_errno(trainer, "nvidia0", ENXIO)) << daemon_->output();
  EXPECT_TRUE(daemon_->eventually_errno(late, "nvidia1", ENXIO)) << daemon_->output();
}

TEST_F(DaemonReload, AChangedNodeInputStartsOver) {
  const auto& trainer = gpu_container("trainer", 0);
  node_->write_checkpoint();
  ASSERT_TRUE(daemon_->start()) << daemon_->output();
  const std::string good = read_file(daemon_->config_path());
  // The fight-loop guard's size is each container's: a change re-creates them.
  ASSERT_TRUE(reload_with(good + "repair:\n  burst: 100\n", 0)) << daemon_->output();
  EXPECT_TRUE(eventually([&] { return count("watching GPU container") == 2; }, 5s)) << daemon_->output();
  EXPECT_EQ(count("node inputs unchanged"), 0u);
  node_->reapply_spec(trainer);
  EXPECT_TRUE(daemon_->eventually_errno(trainer, "nvidia0", ENXIO)) << daemon_->output();
}

}  // namespace
}  // namespace gdw::test
