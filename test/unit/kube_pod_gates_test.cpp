// Reading pods for the readiness gate: only the fields it needs, each only at its place in
// the pod object, with hostile specs (huge, deeply nested, the gate's name planted
// elsewhere, names too long) bounded and never taken for a declaration.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "kube/pod_gates.h"
#include "kube/pod_watcher.h"

namespace gdw::kube {
namespace {

using json = nlohmann::json;

const std::string kUid = "1b2c3d4e-0000-4000-8000-123456789abc";

json pod(const std::string& name, bool gate, const std::string& node = "gpu-node-1") {
  json p = {{"kind", "Pod"},
            {"metadata", {{"name", name}, {"namespace", "ml"}, {"uid", kUid}, {"resourceVersion", "41"}}},
            {"spec", {{"nodeName", node}, {"containers", json::array({{{"name", "trainer"}, {"image", "cuda"}}})}}},
            {"status", {{"phase", "Running"}}}};
  if (gate) p["spec"]["readinessGates"] = json::array({{{"conditionType", "example.com/other"}},
                                                       {{"conditionType", "gpu-devwatch.io/devices-ready"}}});
  return p;
}

std::string event(const std::string& type, const json& object) { return json{{"type", type}, {"object", object}}.dump(); }

TEST(KubePodGates, AWatchEventGivesTheGateAndTheConditionAsTheServerHasIt) {
  json p = pod("trainer-0", true);
  p["status"]["conditions"] = json::array({{{"type", "Ready"}, {"status", "False"}},
                                           {{"type", "gpu-devwatch.io/devices-ready"}, {"status", "True"}}});
  auto e = parse_watch_event(event("MODIFIED", p));
  ASSERT_TRUE(e.ok()) << e.error().message;
  EXPECT_EQ(e->type, WatchEvent::Type::kModified);
  EXPECT_TRUE(e->pod.valid);
  EXPECT_TRUE(e->pod.declares_gate);
  EXPECT_EQ(e->pod.pod.name, "trainer-0");
  EXPECT_EQ(e->pod.pod.pod_namespace, "ml");
  EXPECT_EQ(e->pod.pod.uid, kUid);
  EXPECT_EQ(e->pod.resource_version, "41");
  EXPECT_EQ(e->pod.node_name, "gpu-node-1");
  ASSERT_TRUE(e->pod.gate_status.has_value());
  EXPECT_TRUE(*e->pod.gate_status);
  EXPECT_TRUE(gate_applies(e->pod, "gpu-node-1"));
  EXPECT_FALSE(gate_applies(e->pod, "gpu-node-2")) << "another node's pod";
}

TEST(KubePodGates, StartedOnlyWhenRunningWithEveryContainerStarted) {
  json p = pod("two-0", true);
  p["spec"]["containers"].push_back({{"name", "sidecar"}});
  p["status"]["containerStatuses"] = json::array({{{"name", "trainer"}, {"started", true}},
                                                  {{"name", "sidecar"}, {"started", false}}});
  // A "started" planted elsewhere (an annotation, a container's env) counts for nothing.
  p["metadata"]["annotations"] = {{"started", "true"}};
  p["spec"]["containers"][0]["env"] = json::array({{{"name", "started"}, {"value", "true"}}});
  auto e = parse_watch_event(event("MODIFIED", p));
  ASSERT_TRUE(e.ok());
  EXPECT_EQ(e->pod.containers, 2u);
  EXPECT_EQ(e->pod.started, 1u);
  EXPECT_FALSE(all_started(e->pod)) << "the sidecar has not started";
  p["status"]["containerStatuses"][1]["started"] = true;
  e = parse_watch_event(event("MODIFIED", p));
  EXPECT_TRUE(all_started(e->pod));
  p["status"]["phase"] = "Pending";
  e = parse_watch_event(event("MODIFIED", p));
  EXPECT_FALSE(all_started(e->pod)) << "a Pending pod never";
}

TEST(KubePodGates, APodWithoutTheGateDeclaresNothing) {
  auto e = parse_watch_event(event("ADDED", pod("web-0", false)));
  ASSERT_TRUE(e.ok());
  EXPECT_TRUE(e->pod.valid);
  EXPECT_FALSE(e->pod.declares_gate);
  EXPECT_FALSE(e->pod.gate_status.has_value());
  EXPECT_FALSE(gate_applies(e->pod, "gpu-node-1"));
}

TEST(KubePodGates, TheGatesNamePlantedAnywhereElseDeclaresNothing) {
  json p = pod("sneaky-0", false);
  const json gates = json::array({{{"conditionType", "gpu-devwatch.io/devices-ready"}}});
  p["metadata"]["annotations"] = {{"readinessGates", "gpu-devwatch.io/devices-ready"}};
  p["metadata"]["readinessGates"] = gates;
  p["spec"]["containers"][0]["readinessGates"] = gates;
  p["spec"]["template"] = {{"spec", {{"readinessGates", gates}}}};
  p["status"]["readinessGates"] = gates;
  p["spec"]["readinessGates"] = json::array({{{"type", "gpu-devwatch.io/devices-ready"}},
                                             {{"conditionType", json::array({"gpu-devwatch.io/devices-ready"})}}});
  auto e = parse_watch_event(event("ADDED", p));
  ASSERT_TRUE(e.ok());
  EXPECT_FALSE(e->pod.declares_gate);
  // The same in a list.
  auto page = parse_pod_list(json{{"kind", "PodList"}, {"metadata", {{"resourceVersion", "7"}}},
                                  {"items", json::array({p})}}.dump());
  ASSERT_TRUE(page.ok());
  ASSERT_EQ(page->pods.size(), 1u);
  EXPECT_FALSE(page->pods[0].declares_gate);
}

TEST(KubePodGates, NamesTooLongOrInvalidMakeThePodUnusable) {
  for (auto [field, value] : std::vector<std::pair<std::string, std::string>>{
           {"name", std::string(300, 'a')},
           {"namespace", "Bad_Namespace"},
           {"uid", "../../../etc"},
           {"uid", std::string(100, 'a')},
           {"name", "a/b"}}) {
    json p = pod("x", true);
    p["metadata"][field] = value;
    auto e = parse_watch_event(event("ADDED", p));
    ASSERT_TRUE(e.ok());
    EXPECT_TRUE(e->pod.declares_gate);
    EXPECT_FALSE(e->pod.valid) << field << "=" << value;
    EXPECT_FALSE(gate_applies(e->pod, "gpu-node-1")) << field;
  }
  json ended = pod("done-0", true);
  ended["status"]["phase"] = "Succeeded";
  EXPECT_FALSE(gate_applies(parse_watch_event(event("MODIFIED", ended))->pod, "gpu-node-1"))
      << "a pod that ended is not written";
}

TEST(KubePodGates, AHugeDeeplyNestedSpecIsReadInBoundedStateAndStillJudged) {
  json p = pod("deep-0", true);
  p["spec"]["containers"][0]["env"] = json::array({{{"name", "BLOB"}, {"value", std::string(1 << 20, 'x')}}});
  p["spec"]["overhead"] = "NEST";  // keys are sorted: readinessGates comes after it
  std::string nest;
  for (int i = 0; i < 5000; ++i) nest += R"({"k":[)";
  nest += R"("leaf")";
  for (int i = 0; i < 5000; ++i) nest += "]}";
  std::string text = event("ADDED", p);
  text.replace(text.find(R"("NEST")"), 6, nest);
  auto e = parse_watch_event(text);
  ASSERT_TRUE(e.ok()) << e.error().message;
  EXPECT_TRUE(e->pod.valid);
  EXPECT_TRUE(e->pod.declares_gate) << "the gate after 10000 levels of nesting is still at its place";
  EXPECT_EQ(e->pod.pod.name, "deep-0");
}

TEST(KubePodGates, AListPageGivesItsPodsResourceVersionAndContinueToken) {
  json list = {{"kind", "PodList"},
               {"metadata", {{"resourceVersion", "1234"}, {"continue", "eyJ2IjoibWV0YS5rOHMuaW8vdjEi+/="}}},
               {"items", json::array({pod("a", true), pod("b", false)})}};
  list["items"][1]["metadata"]["uid"] = "2b2c3d4e-0000-4000-8000-123456789abc";
  auto page = parse_pod_list(list.dump());
  ASSERT_TRUE(page.ok()) << page.error().message;
  EXPECT_EQ(page->resource_version, "1234");
  EXPECT_EQ(page->continue_token, "eyJ2IjoibWV0YS5rOHMuaW8vdjEi+/=");
  ASSERT_EQ(page->pods.size(), 2u);
  EXPECT_TRUE(page->pods[0].declares_gate);
  EXPECT_FALSE(page->pods[1].declares_gate);
  EXPECT_EQ(page->pods[1].pod.name, "b");
  EXPECT_EQ(percent_encode(page->continue_token), "eyJ2IjoibWV0YS5rOHMuaW8vdjEi%2B%2F%3D");
}

TEST(KubePodGates, AListWithMoreItemsThanAskedForIsRefused) {
  json list = {{"kind", "PodList"}, {"metadata", {{"resourceVersion", "1"}}}, {"items", json::array()}};
  for (int i = 0; i < 11; ++i) list["items"].push_back(pod("p" + std::to_string(i), true));
  EXPECT_TRUE(parse_pod_list(list.dump(), 11).ok());
  auto r = parse_pod_list(list.dump(), 10);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.error().message.find("more than 10"), std::string::npos) << r.error().message;
}

TEST(KubePodGates, ErrorsBookmarksAndDeletions) {
  auto gone = parse_watch_event(
      R"j({"type":"ERROR","object":{"kind":"Status","apiVersion":"v1","status":"Failure","message":"too old resource version: 1 (5)","reason":"Expired","code":410}})j");
  ASSERT_TRUE(gone.ok());
  EXPECT_EQ(gone->type, WatchEvent::Type::kError);
  EXPECT_EQ(gone->error_code, 410);
  auto bookmark = parse_watch_event(R"({"type":"BOOKMARK","object":{"kind":"Pod","metadata":{"resourceVersion":"99"}}})");
  ASSERT_TRUE(bookmark.ok());
  EXPECT_EQ(bookmark->type, WatchEvent::Type::kBookmark);
  EXPECT_EQ(bookmark->pod.resource_version, "99");
  auto deleted = parse_watch_event(event("DELETED", pod("a", true)));
  ASSERT_TRUE(deleted.ok());
  EXPECT_EQ(deleted->type, WatchEvent::Type::kDeleted);
  EXPECT_EQ(deleted->pod.pod.uid, kUid);
  EXPECT_FALSE(parse_watch_event(R"({"type":"ADDED","object":{"metadata":)").ok()) << "a cut line";
  EXPECT_FALSE(parse_watch_event("not json").ok());
}

}  // namespace
}  // namespace gdw::kube
