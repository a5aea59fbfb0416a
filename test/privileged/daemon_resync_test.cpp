// What the periodic resync still catches now that it skips state directories whose listing
// did not change (runtime/bundles.h, kChangedListings): a bundle that appears without any
// event the daemon watches, after its identification retries gave up.
#include <gtest/gtest.h>
#include <signal.h>
#include <stdio.h>

#include <cerrno>
#include <thread>

#include "support/daemon_fixture.h"

namespace gdw::test {
namespace {

using namespace std::chrono_literals;

class DaemonResync : public DaemonTest {
 protected:
  double resyncs() { return daemon_->metric("gpu_devwatch_resyncs_total", {{"reason", "signal"}}); }
  // SIGUSR1: the same resync as the periodic one.
  bool resync() {
    const double before = resyncs();
    daemon_->process().signal(SIGUSR1);
    return eventually([&] { return resyncs() >= before + 1; }, 5s);
  }
};

TEST_F(DaemonResync, AConfigWrittenLateIntoAListedTaskDirectoryIsFoundByTheNextResync) {
  const auto& c = node_->add_container({.pod_namespace = "ml", .pod_name = "late-0", .container_name = "late",
                                        .device_ids = {node_->gpu_uuid(0)}, .hook_grants_gpu = false,
                                        .hook_grants_uvm = false});
  node_->write_checkpoint();
  // The runtime made the task directory; its config.json is not there yet.
  const std::string config = node_->state_dir() + "/" + c.id + "/config.json";
  const std::string aside = node_->state_dir() + "/../" + c.id + ".json";
  ASSERT_EQ(::rename(config.c_str(), aside.c_str()), 0);
  ASSERT_TRUE(daemon_->start()) << daemon_->output();
  EXPECT_TRUE(eventually([&] { return daemon_->metric("gpu_devwatch_containers_unidentified") == 1; }))
      << daemon_->output();

  // The daemon's own retries (10 ms to 5 s after the cgroup appeared) are over; a resync
  // lists the state directory, settled by now, so the next one can skip it.
  std::this_thread::sleep_for(6500ms);
  ASSERT_TRUE(resync()) << daemon_->output();
  ASSERT_EQ(node_->open_errno(c, "nvidia0"), EPERM);

  // Written into the task directory: the state directory's listing does not change and no
  // watched directory sees an event.
  ASSERT_EQ(::rename(aside.c_str(), config.c_str()), 0);
  ASSERT_TRUE(resync()) << daemon_->output();
  EXPECT_TRUE(daemon_->eventually_errno(c, "nvidia0", ENXIO)) << daemon_->output();
  EXPECT_EQ(daemon_->metric("gpu_devwatch_containers_unidentified"), 0);
}

}  // namespace
}  // namespace gdw::test
