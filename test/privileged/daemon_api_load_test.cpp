// The requests one daemon makes of the API server, counted at the stateful local API
// server: its first minute on a node with gated pods (the node read and the pod list both
// from the API server's cache, one watch, one write of the conditions, one gate write per
// gated pod, no quorum read, every request named gpu-devwatch/<version> (<node>)), and
// what it keeps making afterwards (a watch re-established every 5-10 min, the conditions
// re-asserted every conditions.resync). The figures for a fleet are in
// docs/conditions-and-gate.md; this test prints the counts it saw.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include <cstdio>
#include <thread>

#include "support/daemon_api_fixture.h"

namespace gdw::test {
namespace {

using json = nlohmann::json;

constexpr const char* kNode = kApiNode;

json gated_pod(const SandboxContainer& c) {
  return {{"kind", "Pod"},
          {"metadata", {{"name", c.spec.pod_name}, {"namespace", c.spec.pod_namespace}, {"uid", c.spec.pod_uid}}},
          {"spec",
           {{"nodeName", kNode},
            {"containers", json::array({{{"name", c.spec.container_name}}})},
            {"readinessGates", json::array({{{"conditionType", "gpu-devwatch.io/devices-ready"}}})}}},
          {"status",
           {{"phase", "Running"},
            {"containerStatuses", json::array({{{"name", c.spec.container_name}, {"started", true}}})}}}};
}

struct Counts {
  int node_reads = 0, node_reads_from_cache = 0, node_writes = 0, lists = 0, lists_from_cache = 0, watches = 0,
      pod_writes = 0, events = 0, other = 0, named = 0, total = 0;
  std::string watch_path;
};

Counts count(const std::vector<RecordedRequest>& requests) {
  Counts c;
  for (const auto& r : requests) {
    ++c.total;
    c.named += r.user_agent.rfind("gpu-devwatch/", 0) == 0 && r.user_agent.find("(gpu-node-1)") != std::string::npos;
    const bool from_cache = r.path.find("resourceVersion=0") != std::string::npos;
    if (r.method == "GET" && r.path.rfind("/api/v1/nodes/", 0) == 0) {
      ++c.node_reads;
      c.node_reads_from_cache += from_cache;
    } else if (r.method == "PATCH" && r.path.rfind("/api/v1/nodes/", 0) == 0) {
      ++c.node_writes;
    } else if (r.method == "GET" && r.path.find("watch=true") != std::string::npos) {
      ++c.watches;
      c.watch_path = r.path;
    } else if (r.method == "GET" && r.path.rfind("/api/v1/pods?", 0) == 0) {
      ++c.lists;
      c.lists_from_cache += from_cache && r.path.find("limit=") == std::string::npos;
    } else if (r.method == "PATCH" && r.path.find("/pods/") != std::string::npos) {
      ++c.pod_writes;
    } else if (r.path.find("/events") != std::string::npos) {
      ++c.events;
    } else {
      ++c.other;
    }
  }
  return c;
}

class DaemonApiLoad : public DaemonWithApiServerTest {};

TEST_F(DaemonApiLoad, TheFirstMinuteAsksOnlyTheCacheAndWritesOncePerObject) {
  std::vector<const SandboxContainer*> pods{c_};
  for (int i = 1; i < 3; ++i)
    pods.push_back(&node_->add_container({.pod_namespace = "ml", .pod_name = "serve-" + std::to_string(i),
                                          .container_name = "server", .device_ids = {node_->gpu_uuid(i)}}));
  node_->write_checkpoint();
  for (const auto* p : pods) api_.add_pod(gated_pod(*p));
  std::this_thread::sleep_for(100ms);
  // The kubernetes settings are the defaults (conditions.resync 5m, grace 10s, the gate on).
  ASSERT_TRUE(daemon_->start(api_.config_yaml("", "  readiness_gate: true\n"))) << daemon_->output();
  ASSERT_TRUE(eventually([&] { return count(api_.requests()).pod_writes >= 3; }, 10s)) << daemon_->output();
  std::this_thread::sleep_for(15s);  // a quarter of the first minute: everything at start is done by now
  const Counts c = count(api_.requests());
  std::printf("first minute of one daemon (3 gated pods): %d requests: node read %d (from cache %d), node writes %d, "
              "pod lists %d (from cache %d), watches %d, gate writes %d, events %d, other %d\n",
              c.total, c.node_reads, c.node_reads_from_cache, c.node_writes, c.lists, c.lists_from_cache, c.watches,
              c.pod_writes, c.events, c.other);
  EXPECT_EQ(c.node_reads, 1);
  EXPECT_EQ(c.node_reads_from_cache, 1) << "no quorum read of etcd";
  EXPECT_EQ(c.lists, 1);
  EXPECT_EQ(c.lists_from_cache, 1) << "resourceVersion=0, no limit: the watch cache, one request";
  EXPECT_EQ(c.watches, 1);
  EXPECT_GE(c.node_writes, 1);
  EXPECT_LE(c.node_writes, 2) << "Unknown (only if the check came after the read) and the verdict";
  EXPECT_EQ(c.pod_writes, 3) << "one gate write per gated pod";
  EXPECT_EQ(c.events, 0);
  EXPECT_EQ(c.other, 0);
  EXPECT_EQ(c.named, c.total) << "every request names gpu-devwatch and its node";
  // Afterwards: the watch asks for a timeout between 5 and 10 minutes (re-established that
  // often), and the conditions are re-asserted every conditions.resync (5 m).
  const auto at = c.watch_path.find("timeoutSeconds=");
  ASSERT_NE(at, std::string::npos) << c.watch_path;
  const int timeout = std::stoi(c.watch_path.substr(at + 15));
  EXPECT_GE(timeout, 300);
  EXPECT_LT(timeout, 600);
  std::printf("afterwards, per hour: %d-%d watch requests (timeoutSeconds %d here), 12 node writes, no list\n",
              3600 / 600, 3600 / 300, timeout);
}

}  // namespace
}  // namespace gdw::test
