// Kubernetes Events, the pure part: what an incident says, the Event bodies, and how
// repeats aggregate within a pod's write budget.
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "kube/api_endpoint.h"
#include "kube/event_aggregator.h"
#include "kube/event_model.h"

namespace gdw::kube {
namespace {

using namespace std::chrono_literals;
using nlohmann::json;

const PodRef kPod{"ml", "trainer-0", "1b2c3d4e-0000-4000-8000-123456789abc"};

IncidentFacts revoked_facts(const std::string& detail = "runc (pid 4242, comm runc, /usr/bin/runc, parent containerd-shim) wrote a to devices.deny") {
  IncidentFacts f;
  f.pod = kPod;
  f.container = "trainer";
  f.devices = {"nvidia0", "nvidia-uvm"};
  f.writer = "runc";
  f.writer_detail = detail;
  f.repair_time = std::chrono::microseconds(420);
  return f;
}

struct Clocks {
  Clock::time_point mono = Clock::time_point(1000s);
  WallClock::time_point wall = WallClock::time_point(1'700'000'000s);
  void advance(std::chrono::milliseconds d) {
    mono += d;
    wall += d;
  }
};

EventAggregator aggregator(std::uint32_t per_minute = 4) {
  return EventAggregator(AggregatorOptions{.writes_per_minute = per_minute, .source = {"gpu-devwatch", "node-a"}});
}

TEST(KubeEventMessage, RevokedNamesDevicesWriterAndRepairTime) {
  Incident in = make_incident(Cause::kRevoked, revoked_facts());
  EXPECT_EQ(in.reason, "GPUAccessRevoked");
  EXPECT_EQ(in.pod.uid, kPod.uid);
  EXPECT_NE(in.message.find("container trainer"), std::string::npos) << in.message;
  EXPECT_NE(in.message.find("nvidia0, nvidia-uvm"), std::string::npos) << in.message;
  EXPECT_NE(in.message.find("revoked by runc (pid 4242"), std::string::npos) << in.message;
  EXPECT_NE(in.message.find("restored it in 0.42 ms"), std::string::npos) << in.message;
  EXPECT_TRUE(in.message[0] >= 'A' && in.message[0] <= 'Z') << in.message;
}

TEST(KubeEventMessage, UnknownWriterIsNotInvented) {
  IncidentFacts f = revoked_facts("");
  f.writer.clear();
  Incident in = make_incident(Cause::kRevoked, f);
  EXPECT_EQ(in.message.find(" by "), std::string::npos) << in.message;
  EXPECT_NE(in.message.find("was revoked; gpu-devwatch restored it"), std::string::npos) << in.message;
}

TEST(KubeEventMessage, LostCausesSayWhyAccessStaysLost) {
  IncidentFacts f = revoked_facts();
  Incident observe = make_incident(Cause::kObserveMode, f);
  EXPECT_EQ(observe.reason, "GPUAccessLost");
  EXPECT_NE(observe.message.find("observe mode"), std::string::npos) << observe.message;
  f.problem = "Operation not permitted (a parent cgroup denies it)";
  Incident refused = make_incident(Cause::kGrantRefused, f);
  EXPECT_EQ(refused.reason, "GPUAccessLost");
  EXPECT_NE(refused.message.find("kernel refused"), std::string::npos) << refused.message;
  EXPECT_NE(refused.message.find("parent cgroup denies"), std::string::npos) << refused.message;
  f.problem = "repairs rate-limited to 120/min after a burst of 10";
  Incident throttled = make_incident(Cause::kThrottled, f);
  EXPECT_NE(throttled.message.find("rate-limited"), std::string::npos) << throttled.message;
  // Different causes never fold into one event.
  EXPECT_NE(observe.key, refused.key);
  EXPECT_NE(refused.key, throttled.key);
}

TEST(KubeEventMessage, TenantTextIsBoundedAndHasNoControlCharacters) {
  // comm and the executable path come from the tenant.
  Incident in = make_incident(Cause::kRevoked, revoked_facts("x (comm evil\nInjected: yes\x1b[31m, /" +
                                                             std::string(5000, 'a') + ")"));
  EXPECT_LE(in.message.size(), kMaxMessageBytes);
  EXPECT_EQ(in.message.find('\n'), std::string::npos);
  EXPECT_EQ(in.message.find('\x1b'), std::string::npos);
  // The outcome is never cut off by a long writer description.
  EXPECT_NE(in.message.find("restored it in"), std::string::npos) << in.message;
  // Multi-byte UTF-8 is cut on a character boundary.
  IncidentFacts f = revoked_facts();
  f.container = std::string(2000, '\xc3');  // not valid UTF-8 on its own: the JSON still is
  Incident big = make_incident(Cause::kObserveMode, f);
  EXPECT_LE(big.message.size(), kMaxMessageBytes);
  EventState e{kPod, "n", big.reason, big.message, 1, {}, {}};
  json body;
  EXPECT_NO_THROW(body = json::parse(create_body(e, {})));
  EXPECT_TRUE(body.is_object());
}

TEST(KubeEventMessage, KeyIgnoresPidAndDurationButNotDevicesOrWriter) {
  Incident a = make_incident(Cause::kRevoked, revoked_facts("runc (pid 1)"));
  IncidentFacts later = revoked_facts("runc (pid 2)");
  later.repair_time = 3ms;
  Incident b = make_incident(Cause::kRevoked, later);
  EXPECT_EQ(a.key, b.key);
  IncidentFacts other_device = revoked_facts();
  other_device.devices = {"nvidia1"};
  EXPECT_NE(a.key, make_incident(Cause::kRevoked, other_device).key);
  IncidentFacts other_writer = revoked_facts();
  other_writer.writer = "systemd";
  EXPECT_NE(a.key, make_incident(Cause::kRevoked, other_writer).key);
}

TEST(KubeEventBody, CreateBodyIsACoreV1EventOnThePod) {
  Clocks t;
  auto agg = aggregator();
  auto writes = agg.record(make_incident(Cause::kRevoked, revoked_facts()), t.mono, t.wall);
  ASSERT_EQ(writes.size(), 1u);
  EXPECT_EQ(writes[0].verb, EventWrite::Verb::kCreate);
  EXPECT_EQ(writes[0].path, "/api/v1/namespaces/ml/events");
  json j = json::parse(writes[0].body);
  EXPECT_EQ(j["apiVersion"], "v1");
  EXPECT_EQ(j["kind"], "Event");
  EXPECT_EQ(j["metadata"]["namespace"], "ml");
  EXPECT_EQ(j["metadata"]["name"].get<std::string>().rfind("trainer-0.", 0), 0u) << j.dump();
  EXPECT_EQ(j["involvedObject"], json({{"apiVersion", "v1"}, {"kind", "Pod"}, {"namespace", "ml"},
                                       {"name", "trainer-0"}, {"uid", kPod.uid}}));
  EXPECT_EQ(j["reason"], "GPUAccessRevoked");
  EXPECT_EQ(j["type"], "Warning");
  EXPECT_EQ(j["count"], 1);
  EXPECT_EQ(j["firstTimestamp"], "2023-11-14T22:13:20Z");
  EXPECT_EQ(j["lastTimestamp"], "2023-11-14T22:13:20Z");
  EXPECT_EQ(j["source"], json({{"component", "gpu-devwatch"}, {"host", "node-a"}}));
  EXPECT_EQ(j["reportingComponent"], "gpu-devwatch");
  EXPECT_EQ(j["reportingInstance"], "node-a");
  EXPECT_NE(j["message"].get<std::string>().find("nvidia0"), std::string::npos);
}

TEST(KubeEventBody, EventNamesAreValidObjectNames) {
  const auto t = WallClock::time_point(std::chrono::nanoseconds(0x17a2b3c4d5e6f708LL));
  EXPECT_EQ(event_name("trainer-0", t), "trainer-0.17a2b3c4d5e6f708");
  std::string longest(253, 'a');
  EXPECT_LE(event_name(longest, t).size(), 253u);
  EXPECT_EQ(event_name(longest, t).substr(event_name(longest, t).size() - 17), ".17a2b3c4d5e6f708");
}

TEST(KubeEventAggregation, RepeatsPatchOneEventWithTheCount) {
  Clocks t;
  auto agg = aggregator();
  auto first = agg.record(make_incident(Cause::kRevoked, revoked_facts()), t.mono, t.wall);
  ASSERT_EQ(first.size(), 1u);
  const std::string name = json::parse(first[0].body)["metadata"]["name"];
  t.advance(2000ms);
  auto second = agg.record(make_incident(Cause::kRevoked, revoked_facts("runc (pid 99)")), t.mono, t.wall);
  ASSERT_EQ(second.size(), 1u);
  EXPECT_EQ(second[0].verb, EventWrite::Verb::kPatch);
  EXPECT_EQ(second[0].path, "/api/v1/namespaces/ml/events/" + name);
  json patch = json::parse(second[0].body);
  EXPECT_EQ(patch["count"], 2);
  EXPECT_EQ(patch["lastTimestamp"], "2023-11-14T22:13:22Z");
  EXPECT_NE(patch["message"].get<std::string>().find("pid 99"), std::string::npos) << "the latest occurrence's text";
  // Should the event be gone (TTL), the PATCH falls back to creating it as it stands.
  EXPECT_EQ(second[0].create_path, "/api/v1/namespaces/ml/events");
  json full = json::parse(second[0].create_body);
  EXPECT_EQ(full["metadata"]["name"], name);
  EXPECT_EQ(full["count"], 2);
  EXPECT_EQ(full["firstTimestamp"], "2023-11-14T22:13:20Z");
  EXPECT_EQ(agg.events(), 1u);
}

TEST(KubeEventAggregation, APodCostsAtMostItsBudgetAndTheTotalArrivesLater) {
  Clocks t;
  auto agg = aggregator(4);
  int writes = 0;
  std::string last_body;
  for (int i = 0; i < 50; ++i) {
    auto w = agg.record(make_incident(Cause::kRevoked, revoked_facts()), t.mono, t.wall);
    writes += static_cast<int>(w.size());
    if (!w.empty()) last_body = w.back().body;
    t.advance(100ms);
  }
  EXPECT_EQ(writes, 4) << "1 POST + 3 PATCHes in the first minute";
  EXPECT_EQ(json::parse(last_body)["count"], 4);
  // The rest waits: the next slot is a minute after the first write.
  ASSERT_TRUE(agg.next_flush().has_value());
  const auto slot = *agg.next_flush();
  EXPECT_EQ(slot, Clock::time_point(1000s) + 60s);
  EXPECT_TRUE(agg.flush(slot - 1ms).empty());
  auto later = agg.flush(slot);
  ASSERT_EQ(later.size(), 1u);
  EXPECT_EQ(later[0].verb, EventWrite::Verb::kPatch);
  EXPECT_EQ(json::parse(later[0].body)["count"], 50) << "no incident lost, one write for all";
  EXPECT_FALSE(agg.next_flush().has_value());
}

TEST(KubeEventAggregation, InAnySixtySecondsAtMostTheBudget) {
  Clocks t;
  auto agg = aggregator(3);
  std::vector<Clock::time_point> write_times;
  for (int i = 0; i < 600; ++i) {  // one incident every 500 ms for 5 minutes
    write_times.insert(write_times.end(), agg.record(make_incident(Cause::kRevoked, revoked_facts()), t.mono, t.wall).size(),
                       t.mono);
    if (auto next = agg.next_flush(); next && *next <= t.mono)
      write_times.insert(write_times.end(), agg.flush(t.mono).size(), t.mono);
    t.advance(500ms);
  }
  ASSERT_GE(write_times.size(), 10u);
  for (std::size_t i = 3; i < write_times.size(); ++i)
    EXPECT_GE(write_times[i] - write_times[i - 3], 60s) << "write " << i;
}

TEST(KubeEventAggregation, PodsHaveTheirOwnBudgetsAndIncidentsTheirOwnEvents) {
  Clocks t;
  auto agg = aggregator(1);
  EXPECT_EQ(agg.record(make_incident(Cause::kRevoked, revoked_facts()), t.mono, t.wall).size(), 1u);
  IncidentFacts other_pod = revoked_facts();
  other_pod.pod = {"ml", "trainer-1", "2b2c3d4e-0000-4000-8000-123456789abc"};
  auto w = agg.record(make_incident(Cause::kRevoked, other_pod), t.mono, t.wall);
  ASSERT_EQ(w.size(), 1u) << "another pod's budget is untouched";
  EXPECT_EQ(w[0].verb, EventWrite::Verb::kCreate);
  // Same pod, another incident: a separate event, but the pod's budget is spent.
  IncidentFacts lost = revoked_facts();
  EXPECT_TRUE(agg.record(make_incident(Cause::kObserveMode, lost), t.mono, t.wall).empty());
  EXPECT_EQ(agg.events(), 3u);
  auto later = agg.flush(t.mono + 60s);
  ASSERT_EQ(later.size(), 1u);
  EXPECT_EQ(later[0].verb, EventWrite::Verb::kCreate);
  EXPECT_EQ(json::parse(later[0].body)["reason"], "GPUAccessLost");
}

TEST(KubeEventAggregation, AfterTheWindowANewEventStarts) {
  Clocks t;
  auto agg = aggregator();
  auto first = agg.record(make_incident(Cause::kRevoked, revoked_facts()), t.mono, t.wall);
  t.advance(11min);
  auto again = agg.record(make_incident(Cause::kRevoked, revoked_facts()), t.mono, t.wall);
  ASSERT_EQ(again.size(), 1u);
  EXPECT_EQ(again[0].verb, EventWrite::Verb::kCreate);
  EXPECT_EQ(json::parse(again[0].body)["count"], 1);
  EXPECT_NE(json::parse(again[0].body)["metadata"]["name"], json::parse(first[0].body)["metadata"]["name"]);
}

TEST(KubeEventAggregation, InvalidPodReferencesCostNothing) {
  Clocks t;
  auto agg = aggregator();
  for (PodRef bad : {PodRef{"ml/../kube-system", "p", kPod.uid}, PodRef{"ml", "p?x=1", kPod.uid},
                     PodRef{"ml", "p", "not a uid"}, PodRef{"", "p", kPod.uid}, PodRef{"ML", "p", kPod.uid}}) {
    IncidentFacts f = revoked_facts();
    f.pod = bad;
    bool invalid = false;
    EXPECT_TRUE(agg.record(make_incident(Cause::kRevoked, f), t.mono, t.wall, &invalid).empty());
    EXPECT_TRUE(invalid) << bad.pod_namespace << "/" << bad.name << " " << bad.uid;
  }
  EXPECT_EQ(agg.events(), 0u);
}

TEST(KubeEventAggregation, RemembersABoundedNumberOfEvents) {
  Clocks t;
  EventAggregator agg(AggregatorOptions{.writes_per_minute = 1000, .max_events = 16});
  for (int i = 0; i < 100; ++i) {
    IncidentFacts f = revoked_facts();
    f.devices = {"nvidia" + std::to_string(i)};
    (void)agg.record(make_incident(Cause::kRevoked, f), t.mono, t.wall);
    t.advance(1ms);
  }
  EXPECT_EQ(agg.events(), 16u);
}

TEST(KubeApiEndpoint, ConfiguredServerWinsElseInClusterEnvironment) {
  EXPECT_EQ(api_server_url("https://api.example:6443", "10.0.0.1", "443"), "https://api.example:6443");
  EXPECT_EQ(api_server_url("", "10.96.0.1", "443"), "https://10.96.0.1:443");
  EXPECT_EQ(api_server_url("", "fd00::1", "6443"), "https://[fd00::1]:6443");
  EXPECT_EQ(api_server_url("", "10.96.0.1", nullptr), "https://10.96.0.1:443");
  EXPECT_FALSE(api_server_url("", nullptr, "443").has_value());
  EXPECT_FALSE(api_server_url("", "", "443").has_value());
}

TEST(KubeApiEndpoint, TokenFileContent) {
  EXPECT_EQ(*parse_token("eyJhbGciOi.abc-_x\n"), "eyJhbGciOi.abc-_x");
  EXPECT_FALSE(parse_token(" \n").ok());
  EXPECT_FALSE(parse_token("abc\r\nX-Injected: 1").ok()) << "a token cannot add a header";
}

}  // namespace
}  // namespace gdw::kube
