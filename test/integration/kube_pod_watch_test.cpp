// The pod watch and the status writes against a local HTTPS API server (CA made by the
// test): list (from the cache: resourceVersion=0, one request) then watch of this node's
// pods, only gated pods kept, a dropped watch resumed from its resourceVersion, 410 Gone
// listed again, 500 answers and a hanging server backed off from, 429's Retry-After waited
// out, oversized pods skipped, every request named by its User-Agent; status PATCHes on
// the events' worker, held by a Retry-After too.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include <atomic>
#include <thread>

#include "kube/event_sender.h"
#include "kube/pod_watcher.h"
#include "support/fake_apiserver.h"

namespace gdw::test {
namespace {

using json = nlohmann::json;
using kube::PodWatcher;

std::string uid_of(int i) {
  char buf[40];
  std::snprintf(buf, sizeof buf, "00000000-0000-4000-8000-%012d", i);
  return buf;
}

json pod(int i, bool gate, const std::string& node = "gpu-node-1") {
  json p = {{"kind", "Pod"},
            {"metadata", {{"name", "p-" + std::to_string(i)}, {"namespace", "ml"}, {"uid", uid_of(i)}}},
            {"spec", {{"nodeName", node}, {"containers", json::array({{{"name", "c"}}})}}},
            {"status", {{"phase", "Running"}}}};
  if (gate) p["spec"]["readinessGates"] = json::array({{{"conditionType", "gpu-devwatch.io/devices-ready"}}});
  return p;
}

class PodWatchOverTls : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!server_.running()) GTEST_SKIP() << "no local HTTPS server: " << server_.setup_error();
  }
  std::unique_ptr<PodWatcher> start(kube::PodWatchOptions o = {}) {
    o.node = "gpu-node-1";
    o.backoff_first = std::chrono::milliseconds(100);
    o.backoff_max = std::chrono::milliseconds(400);
    o.jitter = 0;
    return std::make_unique<PodWatcher>(kube::ApiEndpoint{server_.url(), server_.token_file(), server_.ca_file()}, o,
                                        [this] { ++changes_; });
  }
  static bool has(const kube::PodWatchView& v, int i) {
    for (const auto& p : v.pods)
      if (p.pod.uid == uid_of(i)) return true;
    return false;
  }
  std::vector<RecordedRequest> list_requests() const {
    std::vector<RecordedRequest> out;
    for (auto& r : server_.requests_to("GET", "/api/v1/pods?"))
      if (r.path.find("watch=true") == std::string::npos) out.push_back(std::move(r));
    return out;
  }
  std::size_t lists() const { return list_requests().size(); }
  FakeApiServer server_;
  std::atomic<int> changes_{0};
};

TEST_F(PodWatchOverTls, OnlyThisNodesPodsThatDeclareTheGateAreKept) {
  server_.add_pod(pod(1, true));
  server_.add_pod(pod(2, false));
  server_.add_pod(pod(3, true, "gpu-node-2"));
  std::this_thread::sleep_for(100ms);  // the server reads its commands every 20 ms
  auto w = start();
  ASSERT_TRUE(eventually([&] { return w->view().synced; })) << w->view().problem;
  auto v = w->view();
  ASSERT_EQ(v.pods.size(), 1u);
  EXPECT_TRUE(has(v, 1));
  EXPECT_EQ(v.pods[0].pod.name, "p-1");
  EXPECT_FALSE(v.pods[0].observed.has_value());
  EXPECT_GE(changes_.load(), 1);
  auto list = server_.requests_to("GET", "/api/v1/pods?")[0];
  EXPECT_EQ(list.path, "/api/v1/pods?fieldSelector=spec.nodeName%3Dgpu-node-1&resourceVersion=0")
      << "from the watch cache, whole: no quorum read of etcd";
  EXPECT_EQ(list.authorization, "Bearer token-one");
  EXPECT_EQ(list.user_agent.rfind("gpu-devwatch/0.1.0 (", 0), 0u) << list.user_agent;

  // Watched: added, its condition as the API server has it, deleted.
  server_.add_pod(pod(4, true));
  server_.add_pod(pod(5, false));
  ASSERT_TRUE(eventually([&] { return has(w->view(), 4); })) << w->view().problem;
  json with_condition = pod(4, true);
  with_condition["status"]["conditions"] = json::array({{{"type", "gpu-devwatch.io/devices-ready"}, {"status", "False"}}});
  server_.modify_pod(with_condition);
  ASSERT_TRUE(eventually([&] {
    for (const auto& p : w->view().pods)
      if (p.pod.uid == uid_of(4)) return p.observed == std::optional<bool>(false);
    return false;
  }));
  server_.delete_pod("ml", "p-1");
  ASSERT_TRUE(eventually([&] { return !has(w->view(), 1); }));
  EXPECT_FALSE(has(w->view(), 5));
  EXPECT_EQ(w->view().lists, 1u);
}

TEST_F(PodWatchOverTls, ADroppedWatchResumesFromItsResourceVersion) {
  server_.add_pod(pod(1, true));
  std::this_thread::sleep_for(100ms);
  auto w = start();
  ASSERT_TRUE(eventually([&] { return w->view().synced; }));
  std::this_thread::sleep_for(1200ms);  // a watch that lasted: resumed at once
  server_.drop_watches();
  ASSERT_TRUE(eventually([&] { return w->view().watches >= 2; })) << "reconnected";
  server_.add_pod(pod(2, true));
  ASSERT_TRUE(eventually([&] { return has(w->view(), 2); }));
  EXPECT_EQ(w->view().lists, 1u) << "resumed, not listed again";
  auto watches = server_.requests_to("GET", "/api/v1/pods?fieldSelector=spec.nodeName%3Dgpu-node-1&watch=true");
  ASSERT_GE(watches.size(), 2u);
  EXPECT_EQ(watches[1].path.find("resourceVersion=0&"), std::string::npos) << watches[1].path;
  EXPECT_NE(watches[1].path.find("resourceVersion=" + std::to_string(101)), std::string::npos)
      << "the resourceVersion of the list (the first pod's): " << watches[1].path;
}

TEST_F(PodWatchOverTls, GoneListsAgain) {
  server_.add_pod(pod(1, true));
  std::this_thread::sleep_for(100ms);
  auto w = start();
  ASSERT_TRUE(eventually([&] { return w->view().synced; }));
  server_.compact();
  server_.drop_watches();
  server_.delete_pod("ml", "p-1");  // gone while nobody watched from before the compaction
  server_.add_pod(pod(2, true));
  ASSERT_TRUE(eventually([&] { return has(w->view(), 2) && !has(w->view(), 1); })) << w->view().problem;
  EXPECT_GE(w->view().gone, 1u);
  EXPECT_EQ(w->view().lists, 2u);
}

TEST_F(PodWatchOverTls, ErrorAnswersBackOffAndRecover) {
  server_.set_mode("500");
  server_.add_pod(pod(1, true));
  auto w = start();
  ASSERT_TRUE(eventually([&] { return !w->view().problem.empty(); })) << "the failure is told";
  EXPECT_NE(w->view().problem.find("HTTP 500"), std::string::npos) << w->view().problem;
  std::this_thread::sleep_for(1s);
  EXPECT_LE(lists(), 6u) << "backed off: 100, 200, 400, 400 ms";
  server_.set_mode("ok");
  ASSERT_TRUE(eventually([&] { return has(w->view(), 1); }, 3s));
  EXPECT_TRUE(w->view().problem.empty());
}

TEST_F(PodWatchOverTls, AHangingServerNeverHoldsUpStopping) {
  server_.set_mode("hang");
  auto w = start();
  ASSERT_TRUE(eventually([&] { return lists() >= 1; }));
  std::this_thread::sleep_for(200ms);
  const auto t = std::chrono::steady_clock::now();
  w.reset();
  EXPECT_LT(std::chrono::steady_clock::now() - t, 300ms) << "the request in flight ends at once";
  server_.set_mode("ok");
}

TEST_F(PodWatchOverTls, TooManyRequestsIsWaitedOutAsItsRetryAfterSays) {
  server_.set_mode("429:2");
  server_.add_pod(pod(1, true));
  auto w = start();  // its own back-off would ask again after 100 ms
  ASSERT_TRUE(eventually([&] { return lists() >= 1; }));
  std::this_thread::sleep_for(1500ms);
  EXPECT_EQ(lists(), 1u) << "Retry-After: 2 is waited out";
  server_.set_mode("ok");
  ASSERT_TRUE(eventually([&] { return has(w->view(), 1); }, 4s)) << w->view().problem;
  auto asked = list_requests();
  ASSERT_GE(asked.size(), 2u);
  EXPECT_GE(asked[1].time - asked[0].time, 1.9);
}

TEST_F(PodWatchOverTls, ListsWholeFromTheCacheAndSkipsOversizedPods) {
  for (int i = 0; i < 45; ++i) server_.add_pod(pod(i, true));
  std::this_thread::sleep_for(200ms);
  kube::PodWatchOptions o;
  o.max_event_bytes = 64 * 1024;
  o.max_pods = 40;
  auto w = start(o);
  ASSERT_TRUE(eventually([&] { return w->view().synced; }));
  EXPECT_EQ(lists(), 1u) << "45 pods, one answer from the cache";
  EXPECT_EQ(w->view().pods.size(), 40u) << "bounded";
  EXPECT_EQ(w->view().skipped, 5u);
  w.reset();
  for (int i = 0; i < 10; ++i) server_.delete_pod("ml", "p-" + std::to_string(i));  // 35 left: below the bound
  std::this_thread::sleep_for(200ms);
  auto w2 = start(o);
  ASSERT_TRUE(eventually([&] { return w2->view().synced; }));
  json huge = pod(100, true);
  huge["metadata"]["annotations"] = {{"blob", std::string(100 * 1024, 'x')}};
  server_.add_pod(huge);
  server_.add_pod(pod(101, true));
  ASSERT_TRUE(eventually([&] { return has(w2->view(), 101); }));
  EXPECT_FALSE(has(w2->view(), 100)) << "an event over max_event_bytes is not read";
  EXPECT_EQ(w2->view().skipped, 1u);
}

TEST_F(PodWatchOverTls, StatusPatchesGoFirstWithTheirOwnOutcome) {
  kube::EventSender sender({server_.url(), server_.token_file(), server_.ca_file()}, {}, nullptr);
  std::atomic<int> done{0};
  std::atomic<long> http{0};
  kube::StatusWrite w{"/api/v1/nodes/gpu-node-1/status",
                      R"({"status":{"conditions":[{"type":"GPUDeviceAccessDegraded","status":"False"}]}})",
                      [&](kube::SendOutcome o, long status, const std::string&) {
                        http = status;
                        done += o == kube::SendOutcome::kSent ? 1 : 100;
                      }};
  ASSERT_TRUE(sender.enqueue_status(w));
  ASSERT_TRUE(eventually([&] { return done.load() == 1; }));
  EXPECT_EQ(http.load(), 200);
  auto r = server_.requests_to("PATCH", "/api/v1/nodes/");
  ASSERT_EQ(r.size(), 1u);
  EXPECT_EQ(r[0].content_type, "application/strategic-merge-patch+json");
  EXPECT_EQ(server_.node_conditions()["GPUDeviceAccessDegraded"]["status"], "False");
  server_.set_mode("500");
  ASSERT_TRUE(sender.enqueue_status(w));
  ASSERT_TRUE(eventually([&] { return done.load() == 101; }));
  EXPECT_EQ(http.load(), 500);
  // 429 with Retry-After: the next request waits it out.
  server_.set_mode("429:1");
  ASSERT_TRUE(sender.enqueue_status(w));
  ASSERT_TRUE(eventually([&] { return done.load() == 201; }));
  EXPECT_EQ(http.load(), 429);
  server_.set_mode("ok");
  ASSERT_TRUE(sender.enqueue_status(w));
  ASSERT_TRUE(eventually([&] { return done.load() == 202; }, 3s));
  auto patches = server_.requests_to("PATCH", "/api/v1/nodes/");
  ASSERT_EQ(patches.size(), 4u);
  EXPECT_GE(patches[3].time - patches[2].time, 0.9) << "held for Retry-After: 1";
  EXPECT_EQ(patches[3].user_agent.rfind("gpu-devwatch/", 0), 0u) << patches[3].user_agent;
}

}  // namespace
}  // namespace gdw::test
