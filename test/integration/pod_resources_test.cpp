// The PodResources client against real gRPC servers on unix sockets: answers, a slow and a
// silent kubelet, throttling, no socket. The caller must never wait: start_list() returns at
// once and outcomes arrive through fd().
#include "kubeletapi/pod_resources.h"

#include <gtest/gtest.h>

#include <chrono>
#include <cstdio>
#include <thread>

#include "support/kubelet_grpc_fakes.h"
#include "support/temp_dir.h"

namespace gdw {
namespace {

using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;

v1::ListPodResourcesResponse two_pods() {
  v1::ListPodResourcesResponse response;
  auto* train = response.add_pod_resources();
  train->set_name("train-0");
  train->set_namespace_("ml");
  auto* worker = train->add_containers();
  worker->set_name("worker");
  // kubelet sends one ContainerDevices per device.
  auto* first = worker->add_devices();
  first->set_resource_name("nvidia.com/gpu");
  first->add_device_ids("GPU-aaaa");
  auto* second = worker->add_devices();
  second->set_resource_name("nvidia.com/gpu");
  second->add_device_ids("GPU-bbbb");
  auto* mig = worker->add_devices();
  mig->set_resource_name("nvidia.com/mig-1g.12gb");
  mig->add_device_ids("MIG-cccc");
  train->add_containers()->set_name("sidecar");
  auto* web = response.add_pod_resources();
  web->set_name("web");
  web->set_namespace_("default");
  web->add_containers()->set_name("nginx");
  return response;
}

std::unique_ptr<PodResourcesClient> client_for(const std::string& socket, Duration timeout,
                                               Duration min_interval = Duration(0)) {
  auto client = PodResourcesClient::create({socket, timeout, min_interval});
  EXPECT_TRUE(client.ok()) << (client.ok() ? "" : client.error().message);
  return client.ok() ? std::move(*client) : nullptr;
}

// Starts a List, asserting the caller got control back at once.
void start_quickly(PodResourcesClient& client) {
  test::warm_up_grpc_client();
  Status started;
  EXPECT_TRUE(test::returns_at_once([&] { started = client.start_list(); }));
  ASSERT_TRUE(started.ok()) << started.error().message;
}

PodResourcesOutcome wait_outcome(PodResourcesClient& client, std::chrono::milliseconds timeout = 5s) {
  EXPECT_TRUE(test::wait_readable(client.fd(), timeout)) << "no outcome within " << timeout.count() << " ms";
  auto outcome = client.take();
  EXPECT_TRUE(outcome.has_value()) << "fd() was readable but take() had nothing";
  return outcome ? std::move(*outcome) : PodResourcesOutcome{};
}

TEST(PodResourcesClient, ListsEveryContainerWithItsDevicesPerResource) {
  test::TempDir dir("gdw-podres");
  const std::string socket = dir / "kubelet.sock";
  test::FakePodResources kubelet(socket);
  kubelet.set_response(two_pods());
  auto client = client_for(socket, 2000ms);

  start_quickly(*client);
  PodResourcesOutcome outcome = wait_outcome(*client);

  ASSERT_TRUE(outcome.ok()) << outcome.error->message;
  std::vector<PodResourcesContainer> expected = {
      {"ml", "train-0", "worker", {{"nvidia.com/gpu", {"GPU-aaaa", "GPU-bbbb"}}, {"nvidia.com/mig-1g.12gb", {"MIG-cccc"}}}},
      {"ml", "train-0", "sidecar", {}},
      {"default", "web", "nginx", {}},
  };
  EXPECT_EQ(outcome.containers, expected);
  EXPECT_GT(outcome.latency.count(), 0);
  EXPECT_EQ(kubelet.list_calls(), 1);
  EXPECT_FALSE(client->busy());
  EXPECT_FALSE(test::readable_now(client->fd())) << "fd() stays readable after take()";
}

TEST(PodResourcesClient, CallsTheMethodPathKubeletServes) {
  test::TempDir dir("gdw-podres");
  const std::string socket = dir / "kubelet.sock";
  test::MethodRecorder server(socket);
  auto client = client_for(socket, 2000ms);

  start_quickly(*client);
  PodResourcesOutcome outcome = wait_outcome(*client);

  EXPECT_EQ(server.methods(), std::vector<std::string>{"/v1.PodResourcesLister/List"});
  ASSERT_FALSE(outcome.ok());
  EXPECT_EQ(outcome.error->kind, CallErrorKind::kOther);
}

TEST(PodResourcesClient, NothingWaitsInTakeWhileTheCallRuns) {
  test::TempDir dir("gdw-podres");
  const std::string socket = dir / "kubelet.sock";
  test::FakePodResources kubelet(socket);
  kubelet.set_delay(300ms);
  auto client = client_for(socket, 2000ms);

  start_quickly(*client);
  EXPECT_FALSE(test::readable_now(client->fd()));
  EXPECT_FALSE(client->take().has_value());
  EXPECT_TRUE(client->busy());
  EXPECT_TRUE(wait_outcome(*client).ok());
}

TEST(PodResourcesClient, SlowKubeletHitsTheDeadlineAndTheNextCallWorks) {
  test::TempDir dir("gdw-podres");
  const std::string socket = dir / "kubelet.sock";
  test::FakePodResources kubelet(socket);
  kubelet.set_response(two_pods());
  kubelet.set_delay(3000ms);
  auto client = client_for(socket, 200ms);

  const auto before = Clock::now();
  start_quickly(*client);
  PodResourcesOutcome late = wait_outcome(*client);
  const auto waited = Clock::now() - before;

  ASSERT_FALSE(late.ok());
  EXPECT_EQ(late.error->kind, CallErrorKind::kDeadlineExceeded) << late.error->message;
  EXPECT_NE(late.error->message.find(socket), std::string::npos) << late.error->message;
  EXPECT_TRUE(late.containers.empty());
  EXPECT_GE(waited, 190ms);
  EXPECT_LT(waited, 1500ms) << "the outcome waited for the server instead of the deadline";

  kubelet.set_delay(0ms);
  start_quickly(*client);
  PodResourcesOutcome next = wait_outcome(*client);
  ASSERT_TRUE(next.ok()) << next.error->message;
  EXPECT_EQ(next.containers.size(), 3u);
}

TEST(PodResourcesClient, KubeletThatAcceptsAndNeverSpeaksHitsTheDeadline) {
  test::TempDir dir("gdw-podres");
  const std::string socket = dir / "kubelet.sock";
  test::SilentSocket hung(socket);
  auto client = client_for(socket, 300ms);

  const auto before = Clock::now();
  start_quickly(*client);
  PodResourcesOutcome outcome = wait_outcome(*client);
  const auto waited = Clock::now() - before;

  ASSERT_FALSE(outcome.ok());
  EXPECT_EQ(outcome.error->kind, CallErrorKind::kDeadlineExceeded) << outcome.error->message;
  EXPECT_LT(waited, 1500ms);
}

TEST(PodResourcesClient, MissingSocketIsReportedAtOnce) {
  test::TempDir dir("gdw-podres");
  const std::string socket = dir / "pod-resources/kubelet.sock";
  auto client = client_for(socket, 2000ms);

  start_quickly(*client);
  EXPECT_TRUE(test::readable_now(client->fd()));
  PodResourcesOutcome outcome = wait_outcome(*client, 0ms);

  ASSERT_FALSE(outcome.ok());
  EXPECT_EQ(outcome.error->kind, CallErrorKind::kSocketAbsent);
  EXPECT_NE(outcome.error->message.find(socket), std::string::npos) << outcome.error->message;
}

TEST(PodResourcesClient, SocketNobodyListensOnIsUnavailable) {
  test::TempDir dir("gdw-podres");
  const std::string socket = dir / "kubelet.sock";
  test::make_stale_socket(socket);
  auto client = client_for(socket, 2000ms);

  start_quickly(*client);
  PodResourcesOutcome outcome = wait_outcome(*client);

  ASSERT_FALSE(outcome.ok());
  EXPECT_EQ(outcome.error->kind, CallErrorKind::kUnavailable) << outcome.error->message;
}

TEST(PodResourcesClient, ThrottlingIsReportedAsResourceExhausted) {
  test::TempDir dir("gdw-podres");
  const std::string socket = dir / "kubelet.sock";
  test::FakePodResources kubelet(socket);
  kubelet.set_status(grpc::Status(grpc::StatusCode::RESOURCE_EXHAUSTED, "rejected by rate limit"));
  auto client = client_for(socket, 2000ms);

  start_quickly(*client);
  PodResourcesOutcome outcome = wait_outcome(*client);

  ASSERT_FALSE(outcome.ok());
  EXPECT_EQ(outcome.error->kind, CallErrorKind::kResourceExhausted);
  EXPECT_NE(outcome.error->message.find("rejected by rate limit"), std::string::npos) << outcome.error->message;
}

TEST(PodResourcesClient, StartsAtMostOneCallPerInterval) {
  test::TempDir dir("gdw-podres");
  const std::string socket = dir / "kubelet.sock";
  test::FakePodResources kubelet(socket);
  auto client = client_for(socket, 2000ms, 10000ms);
  const auto t0 = Clock::now();

  ASSERT_TRUE(client->start_list(t0).ok());
  Status while_busy = client->start_list(t0 + 20s);
  EXPECT_FALSE(while_busy.ok()) << "a second call started while one was in flight";
  ASSERT_TRUE(wait_outcome(*client).ok());

  Status too_soon = client->start_list(t0 + 9s);
  ASSERT_FALSE(too_soon.ok());
  EXPECT_NE(too_soon.error().message.find("at most one call per 10s"), std::string::npos) << too_soon.error().message;
  EXPECT_EQ(client->next_start(), t0 + 10s);

  ASSERT_TRUE(client->start_list(t0 + 10s).ok());
  ASSERT_TRUE(wait_outcome(*client).ok());
  EXPECT_EQ(kubelet.list_calls(), 2);
}

TEST(PodResourcesClient, ReachesKubeletAgainAfterItRestarted) {
  test::TempDir dir("gdw-podres");
  const std::string socket = dir / "kubelet.sock";
  auto client = client_for(socket, 2000ms);
  auto kubelet = std::make_unique<test::FakePodResources>(socket);
  start_quickly(*client);
  ASSERT_TRUE(wait_outcome(*client).ok());

  kubelet.reset();
  std::remove(socket.c_str());
  start_quickly(*client);
  PodResourcesOutcome down = wait_outcome(*client);
  ASSERT_FALSE(down.ok());
  EXPECT_EQ(down.error->kind, CallErrorKind::kSocketAbsent) << down.error->message;

  kubelet = std::make_unique<test::FakePodResources>(socket);
  kubelet->set_response(two_pods());
  // The daemon calls every pod_resources_interval (10 s by default): a second is plenty for
  // the channel's reconnect backoff.
  std::this_thread::sleep_for(1100ms);
  start_quickly(*client);
  PodResourcesOutcome back = wait_outcome(*client);
  ASSERT_TRUE(back.ok()) << back.error->message;
  EXPECT_EQ(back.containers.size(), 3u);
}

TEST(PodResourcesClient, DestroyingItWithACallToAHungKubeletReturnsPromptly) {
  test::TempDir dir("gdw-podres");
  const std::string socket = dir / "kubelet.sock";
  test::SilentSocket hung(socket);
  auto client = client_for(socket, 60000ms);
  start_quickly(*client);

  const auto before = Clock::now();
  client.reset();
  EXPECT_LT(Clock::now() - before, 500ms);
}

}  // namespace
}  // namespace gdw
