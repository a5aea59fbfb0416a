// The readiness gate through a pod watch the API server ends with 410 Gone (an ERROR event
// in the stream: the revisions it had still to send are compacted away), with the real
// daemon on real v1 device cgroups beside the local HTTPS API server: the daemon lists its
// node's pods again (resourceVersion=0, whole), watches from that list, and what changed
// while the watch was falling behind (a pod added, one whose container lacks its GPU, one
// deleted) shows in the gates as it would have through the watch: nothing lost, and no
// "True" for a pod whose GPU is missing.
#include <gtest/gtest.h>

#include <string>
#include <thread>
#include <vector>

#include "support/daemon_api_fixture.h"

namespace gdw::test {
namespace {

// What a pod GET asks for, as the request log shows it.
bool is_watch(const RecordedRequest& r) { return r.path.find("&watch=true") != std::string::npos; }

// The resourceVersion a request names; -1 when it names none.
long resource_version_of(const std::string& path) {
  const auto at = path.find("resourceVersion=");
  if (at == std::string::npos) return -1;
  return std::stol(path.substr(at + std::string("resourceVersion=").size()));
}

class DaemonPodWatchGone : public DaemonWithApiServerTest {
 protected:
  // The pod lists and watches, in the order the API server got them.
  std::vector<RecordedRequest> pod_gets() const { return api_.requests_to("GET", "/api/v1/pods?"); }
  std::size_t lists() const {
    std::size_t n = 0;
    for (const auto& r : pod_gets()) n += !is_watch(r);
    return n;
  }
};

TEST_F(DaemonPodWatchGone, AWatchEndedByGoneListsAgainAndMissesNothing) {
  const auto& old = node_->add_container({.pod_namespace = "ml", .pod_name = "old-0", .container_name = "o"});
  const auto& late = node_->add_container({.pod_namespace = "ml", .pod_name = "late-0", .container_name = "l"});
  const auto& short_of_gpu = node_->add_container(
      {.pod_namespace = "ml", .pod_name = "short-0", .container_name = "s", .device_ids = {node_->gpu_uuid(1)}});
  node_->write_checkpoint();
  ASSERT_EQ(node_->cgroups().deny(short_of_gpu.cgroup_rel, "c 195:1 rw"), 0);  // observe mode: stays missing
  api_.add_pod(running_pod_object(*c_, true));
  api_.add_pod(running_pod_object(old, true));
  std::this_thread::sleep_for(100ms);
  ASSERT_TRUE(daemon_->start("mode: observe\n" + api_.config_yaml("", "  grace: 1s\n"))) << daemon_->output();
  ASSERT_TRUE(eventually([&] { return gate_of(*c_) == "True" && gate_of(old) == "True"; }, 5s)) << daemon_->output();
  ASSERT_TRUE(eventually([&] { return pod_gets().size() == 2; })) << "listed, then watching";
  // short-0's miss has outlasted the grace: its gate is to be "False" from the first write.
  ASSERT_TRUE(eventually([&] { return status_of("GPUDeviceAccessDegraded") == "True"; })) << daemon_->output();
  const long first_watch_from = resource_version_of(pod_gets()[1].path);

  // The watch falls behind while old-0 is deleted and two gated pods arrive: it ends with
  // 410 Gone and never sends those changes.
  api_.expire_watches({.added = {running_pod_object(late, true), running_pod_object(short_of_gpu, true)},
                       .deleted = {{"ml", "old-0"}}});
  ASSERT_TRUE(eventually([&] { return gate_of(late) == "True"; }, 10s)) << daemon_->output();
  ASSERT_TRUE(eventually([&] { return gate_of(short_of_gpu) == "False"; }, 5s)) << daemon_->output();
  EXPECT_EQ(api_.pod_condition("ml", "short-0")["reason"], "GPUDevicesMissing");
  EXPECT_TRUE(eventually([&] { return daemon_->metric("gpu_devwatch_readiness_gate_pods") == 3; }))
      << "trainer-0, late-0 and short-0; old-0 is gone\n" << daemon_->metrics();

  // Listed again at once (no watch from the old resourceVersion first), from the cache and
  // whole, and watched from that list's resourceVersion.
  auto gets = pod_gets();
  ASSERT_EQ(gets.size(), 4u) << "list, watch, list, watch";
  for (std::size_t i : {0u, 2u}) {
    EXPECT_FALSE(is_watch(gets[i])) << gets[i].path;
    EXPECT_EQ(resource_version_of(gets[i].path), 0) << gets[i].path;
    EXPECT_EQ(gets[i].path.find("limit="), std::string::npos) << "no paging: " << gets[i].path;
    EXPECT_EQ(gets[i].path.find("continue="), std::string::npos) << gets[i].path;
  }
  ASSERT_TRUE(is_watch(gets[3])) << gets[3].path;
  EXPECT_GT(resource_version_of(gets[3].path), first_watch_from) << gets[3].path;

  // That watch delivers: a pod added now is seen without another list.
  const auto& next = node_->add_container({.pod_namespace = "ml", .pod_name = "next-0", .container_name = "n"});
  api_.add_pod(running_pod_object(next, true));
  ASSERT_TRUE(eventually([&] { return gate_of(next) == "True"; }, 5s)) << daemon_->output();
  EXPECT_EQ(lists(), 2u);
  EXPECT_EQ(daemon_->metric("gpu_devwatch_pod_watch_lists_total"), 2);

  // Nothing claimed what was not so: short-0 was only ever written "False", old-0 never
  // again after it was deleted.
  const auto short_writes = api_.requests_to("PATCH", "/api/v1/namespaces/ml/pods/short-0/status");
  ASSERT_FALSE(short_writes.empty());
  for (const auto& w : short_writes) EXPECT_EQ(w.body["status"]["conditions"][0]["status"], "False") << w.body.dump();
  EXPECT_EQ(api_.requests_to("PATCH", "/api/v1/namespaces/ml/pods/old-0/status").size(), 1u) << "its first True only";
}

}  // namespace
}  // namespace gdw::test
