// The events sender against a local HTTPS API server with a CA made by the test: real TLS
// (verified peer and host), bearer token (rotated), PATCH that falls back to POST, and the
// failures that drop writes without waiting.
#include <gtest/gtest.h>

#include <mutex>
#include <thread>

#include "kube/event_aggregator.h"
#include "kube/event_sender.h"
#include "support/fake_apiserver.h"

namespace gdw::test {
namespace {

using kube::EventWrite;
using kube::SendOutcome;

class Outcomes {
 public:
  kube::EventSender::OnOutcome callback() {
    return [this](SendOutcome o, const std::string& d) {
      std::lock_guard lock(mu_);
      seen_.emplace_back(o, d);
    };
  }
  std::size_t count() {
    std::lock_guard lock(mu_);
    return seen_.size();
  }
  std::pair<SendOutcome, std::string> at(std::size_t i) {
    std::lock_guard lock(mu_);
    return seen_.at(i);
  }

 private:
  std::mutex mu_;
  std::vector<std::pair<SendOutcome, std::string>> seen_;
};

std::vector<EventWrite> incident_writes(kube::EventAggregator& agg, int n) {
  kube::IncidentFacts f;
  f.pod = {"ml", "trainer-0", "1b2c3d4e-0000-4000-8000-123456789abc"};
  f.container = "trainer";
  f.devices = {"nvidia0"};
  std::vector<EventWrite> out;
  for (int i = 0; i < n; ++i)
    for (auto& w : agg.record(kube::make_incident(kube::Cause::kRevoked, f), Clock::now(),
                              kube::WallClock::now()))
      out.push_back(std::move(w));
  return out;
}

class EventSenderOverTls : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!server_.running()) GTEST_SKIP() << "no local HTTPS server: " << server_.setup_error();
  }
  kube::ApiEndpoint endpoint() { return {server_.url(), server_.token_file(), server_.ca_file()}; }
  FakeApiServer server_;
  Outcomes outcomes_;
  kube::EventAggregator agg_{kube::AggregatorOptions{.writes_per_minute = 100, .source = {"gpu-devwatch", "node-a"}}};
};

TEST_F(EventSenderOverTls, PostThenPatchWithTheBearerToken) {
  kube::EventSender sender(endpoint(), {}, outcomes_.callback());
  for (auto& w : incident_writes(agg_, 2)) ASSERT_TRUE(sender.enqueue(std::move(w)));
  ASSERT_TRUE(eventually([&] { return outcomes_.count() == 2; }, 10s));
  EXPECT_EQ(outcomes_.at(0).first, SendOutcome::kSent) << outcomes_.at(0).second;
  EXPECT_EQ(outcomes_.at(1).first, SendOutcome::kSent) << outcomes_.at(1).second;
  auto reqs = server_.requests();
  ASSERT_EQ(reqs.size(), 2u);
  EXPECT_EQ(reqs[0].method, "POST");
  EXPECT_EQ(reqs[0].path, "/api/v1/namespaces/ml/events");
  EXPECT_EQ(reqs[0].authorization, "Bearer token-one");
  EXPECT_EQ(reqs[0].content_type, "application/json");
  EXPECT_EQ(reqs[0].body["involvedObject"]["uid"], "1b2c3d4e-0000-4000-8000-123456789abc");
  EXPECT_EQ(reqs[1].method, "PATCH");
  EXPECT_EQ(reqs[1].path, "/api/v1/namespaces/ml/events/" + reqs[0].body["metadata"]["name"].get<std::string>());
  EXPECT_EQ(reqs[1].content_type, "application/strategic-merge-patch+json");
  EXPECT_EQ(reqs[1].body["count"], 2);
}

TEST_F(EventSenderOverTls, ARotatedTokenIsUsedForTheNextWrite) {
  kube::EventSender sender(endpoint(), {}, outcomes_.callback());
  auto writes = incident_writes(agg_, 2);
  ASSERT_TRUE(sender.enqueue(std::move(writes[0])));
  ASSERT_TRUE(eventually([&] { return outcomes_.count() == 1; }, 10s));
  server_.rotate_token("token-two");
  ASSERT_TRUE(sender.enqueue(std::move(writes[1])));
  ASSERT_TRUE(eventually([&] { return outcomes_.count() == 2; }, 10s));
  auto reqs = server_.requests();
  ASSERT_EQ(reqs.size(), 2u);
  EXPECT_EQ(reqs[0].authorization, "Bearer token-one");
  EXPECT_EQ(reqs[1].authorization, "Bearer token-two");
}

TEST_F(EventSenderOverTls, APatchForAnEventTheServerLacksCreatesIt) {
  kube::EventSender sender(endpoint(), {}, outcomes_.callback());
  auto writes = incident_writes(agg_, 3);  // the POST is "lost": only the PATCH goes
  ASSERT_TRUE(sender.enqueue(std::move(writes[2])));
  ASSERT_TRUE(eventually([&] { return outcomes_.count() == 1; }, 10s));
  EXPECT_EQ(outcomes_.at(0).first, SendOutcome::kSent) << outcomes_.at(0).second;
  auto reqs = server_.requests();
  ASSERT_EQ(reqs.size(), 2u);
  EXPECT_EQ(reqs[0].method, "PATCH");
  EXPECT_EQ(reqs[1].method, "POST");
  EXPECT_EQ(reqs[1].path, "/api/v1/namespaces/ml/events");
  EXPECT_EQ(reqs[1].body["count"], 3);
}

TEST_F(EventSenderOverTls, ACertificateFromAnotherCaIsRefused) {
  kube::EventSender sender({server_.url(), server_.token_file(), server_.other_ca_file()}, {}, outcomes_.callback());
  ASSERT_TRUE(sender.enqueue(std::move(incident_writes(agg_, 1)[0])));
  ASSERT_TRUE(eventually([&] { return outcomes_.count() == 1; }, 10s));
  EXPECT_EQ(outcomes_.at(0).first, SendOutcome::kUnreachable);
  EXPECT_NE(outcomes_.at(0).second.find("certificate"), std::string::npos) << outcomes_.at(0).second;
  EXPECT_TRUE(server_.requests().empty()) << "nothing, not even the token, went over an unverified connection";
}

TEST_F(EventSenderOverTls, TheHostNameIsVerified) {
  // The certificate is for 127.0.0.1; "localhost" resolves there but is not in it.
  kube::EventSender sender({"https://localhost:" + server_.url().substr(server_.url().rfind(':') + 1),
                            server_.token_file(), server_.ca_file()},
                           {}, outcomes_.callback());
  ASSERT_TRUE(sender.enqueue(std::move(incident_writes(agg_, 1)[0])));
  ASSERT_TRUE(eventually([&] { return outcomes_.count() == 1; }, 10s));
  EXPECT_EQ(outcomes_.at(0).first, SendOutcome::kUnreachable) << outcomes_.at(0).second;
  EXPECT_TRUE(server_.requests().empty());
}

TEST_F(EventSenderOverTls, NoTokenFileDropsWithoutConnecting) {
  kube::EventSender sender({server_.url(), server_.token_file() + ".absent", server_.ca_file()}, {},
                           outcomes_.callback());
  ASSERT_TRUE(sender.enqueue(std::move(incident_writes(agg_, 1)[0])));
  ASSERT_TRUE(eventually([&] { return outcomes_.count() == 1; }, 10s));
  EXPECT_EQ(outcomes_.at(0).first, SendOutcome::kNoCredentials);
  EXPECT_NE(outcomes_.at(0).second.find("token.absent"), std::string::npos) << outcomes_.at(0).second;
  EXPECT_TRUE(server_.requests().empty());
}

TEST(EventSender, ConnectionRefusedDropsQuicklyAndAFullQueueRefuses) {
  Outcomes outcomes;
  TempDir dir;
  const std::string token = dir.write("token", "t\n");
  kube::EventAggregator agg{kube::AggregatorOptions{.writes_per_minute = 1000}};
  kube::EventSender sender({"https://127.0.0.1:" + std::to_string(free_port()), token, dir / "ca.crt"},
                           {.queue_capacity = 2}, outcomes.callback());
  int refused = 0;
  for (auto& w : incident_writes(agg, 200)) refused += !sender.enqueue(std::move(w));
  EXPECT_GE(refused, 100) << "a queue of 2 takes at most a few of 200 writes made at once";
  ASSERT_TRUE(eventually([&] { return outcomes.count() >= 1; }, 5s));
  EXPECT_EQ(outcomes.at(0).first, SendOutcome::kUnreachable) << outcomes.at(0).second;
}

TEST(EventSender, StoppingAbortsARequestInFlight) {
  FakeApiServer hung(/*hang=*/true);
  if (!hung.running()) GTEST_SKIP() << hung.setup_error();
  Outcomes outcomes;
  kube::EventAggregator agg{kube::AggregatorOptions{}};
  auto sender = std::make_unique<kube::EventSender>(kube::ApiEndpoint{hung.url(), hung.token_file(), hung.ca_file()},
                                                    kube::EventSender::Options{}, outcomes.callback());
  ASSERT_TRUE(sender->enqueue(std::move(incident_writes(agg, 1)[0])));
  std::this_thread::sleep_for(300ms);  // connected, request sent, no answer
  const auto start = std::chrono::steady_clock::now();
  sender.reset();
  // The transfer is woken (curl_multi_wakeup), not left to notice a flag at its next poll.
  EXPECT_LT(std::chrono::steady_clock::now() - start, 300ms) << "shutdown and reload never wait out the 5 s request timeout";
}

}  // namespace
}  // namespace gdw::test
