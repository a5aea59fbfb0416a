// The device plugin prober against a device-plugins directory holding real gRPC plugins, a
// slow one, a hung one and a dead one's leftover socket: one result per plugin socket, a
// round bounded by the probe deadline, and the caller never waits.
#include "kubeletapi/device_plugins.h"

#include <gtest/gtest.h>

#include <chrono>
#include <cstdio>

#include "support/kubelet_grpc_fakes.h"
#include "support/temp_dir.h"

namespace gdw {
namespace {

using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;

std::unique_ptr<DevicePluginProber> prober_for(const std::string& dir, Duration timeout) {
  auto prober = DevicePluginProber::create(dir, timeout);
  EXPECT_TRUE(prober.ok()) << (prober.ok() ? "" : prober.error().message);
  return prober.ok() ? std::move(*prober) : nullptr;
}

// Starts a round, asserting the caller got control back at once.
void start_quickly(DevicePluginProber& prober) {
  test::warm_up_grpc_client();
  Status started;
  EXPECT_TRUE(test::returns_at_once([&] { started = prober.start(); }));
  ASSERT_TRUE(started.ok()) << started.error().message;
}

std::vector<DevicePluginProbe> wait_round(DevicePluginProber& prober, std::chrono::milliseconds timeout = 5s) {
  EXPECT_TRUE(test::wait_readable(prober.fd(), timeout)) << "no results within " << timeout.count() << " ms";
  auto results = prober.take();
  EXPECT_TRUE(results.has_value()) << "fd() was readable but take() had nothing";
  return results ? std::move(*results) : std::vector<DevicePluginProbe>{};
}

std::vector<std::string> sockets_of(const std::vector<DevicePluginProbe>& results) {
  std::vector<std::string> names;
  for (const auto& r : results) names.push_back(r.socket);
  return names;
}

TEST(DevicePluginProber, ReportsEveryPluginSocketOnItsOwn) {
  test::TempDir dir("gdw-plugins");
  test::FakeDevicePlugin good(dir / "nvidia-gpu.sock");
  test::FakeDevicePlugin slow(dir / "slow.sock", 3000ms);
  test::SilentSocket hung(dir / "hung.sock");
  test::make_stale_socket(dir / "dead.sock");
  test::FakeDevicePlugin kubelet(dir / "kubelet.sock");  // kubelet's registration socket
  dir.write("kubelet_internal_checkpoint", "{}");
  dir.write("not-a-socket.sock", "");
  auto prober = prober_for(dir.path(), 300ms);

  // The second round reuses the channels, hung connections included.
  for (int round = 1; round <= 2; ++round) {
    SCOPED_TRACE("round " + std::to_string(round));
    const auto before = Clock::now();
    start_quickly(*prober);
    EXPECT_FALSE(prober->take().has_value());
    std::vector<DevicePluginProbe> results = wait_round(*prober);
    const auto took = Clock::now() - before;

    ASSERT_EQ(sockets_of(results),
              (std::vector<std::string>{"dead.sock", "hung.sock", "nvidia-gpu.sock", "slow.sock"}));
    const DevicePluginProbe& dead = results[0];
    const DevicePluginProbe& silent = results[1];
    const DevicePluginProbe& up = results[2];
    const DevicePluginProbe& late = results[3];

    EXPECT_TRUE(up.up);
    EXPECT_FALSE(up.error.has_value());
    EXPECT_EQ(up.path, dir / "nvidia-gpu.sock");
    EXPECT_GT(up.latency.count(), 0);
    EXPECT_LT(up.latency, 300ms);

    ASSERT_FALSE(late.up);
    EXPECT_EQ(late.error->kind, CallErrorKind::kDeadlineExceeded) << late.error->message;
    ASSERT_FALSE(silent.up);
    EXPECT_EQ(silent.error->kind, CallErrorKind::kDeadlineExceeded) << silent.error->message;
    EXPECT_GE(silent.latency, 290ms);
    ASSERT_FALSE(dead.up);
    EXPECT_EQ(dead.error->kind, CallErrorKind::kUnavailable) << dead.error->message;
    EXPECT_NE(dead.error->message.find(dir / "dead.sock"), std::string::npos) << dead.error->message;

    EXPECT_LT(took, 1500ms) << "the round waited for the slow plugin instead of the deadline";
  }
  EXPECT_EQ(kubelet.calls(), 0) << "kubelet.sock is kubelet's, not a plugin";
  EXPECT_EQ(good.calls(), 2);
}

TEST(DevicePluginProber, CallsTheMethodPathPluginsServe) {
  test::TempDir dir("gdw-plugins");
  test::MethodRecorder plugin(dir / "nvidia-gpu.sock");
  auto prober = prober_for(dir.path(), 2000ms);

  start_quickly(*prober);
  std::vector<DevicePluginProbe> results = wait_round(*prober);

  EXPECT_EQ(plugin.methods(), std::vector<std::string>{"/v1beta1.DevicePlugin/GetDevicePluginOptions"});
  ASSERT_EQ(results.size(), 1u);
  EXPECT_FALSE(results[0].up);
}

TEST(DevicePluginProber, RemovedSocketDisappearsFromTheNextRound) {
  test::TempDir dir("gdw-plugins");
  test::FakeDevicePlugin gpu(dir / "nvidia-gpu.sock");
  auto rdma = std::make_unique<test::FakeDevicePlugin>(dir / "rdma.sock");
  auto prober = prober_for(dir.path(), 1000ms);

  start_quickly(*prober);
  EXPECT_EQ(sockets_of(wait_round(*prober)), (std::vector<std::string>{"nvidia-gpu.sock", "rdma.sock"}));

  rdma.reset();
  std::remove((dir / "rdma.sock").c_str());
  start_quickly(*prober);
  std::vector<DevicePluginProbe> second = wait_round(*prober);
  ASSERT_EQ(sockets_of(second), std::vector<std::string>{"nvidia-gpu.sock"});
  EXPECT_TRUE(second[0].up);
}

TEST(DevicePluginProber, OneRoundAtATime) {
  test::TempDir dir("gdw-plugins");
  test::FakeDevicePlugin slow(dir / "slow.sock", 200ms);
  auto prober = prober_for(dir.path(), 2000ms);

  start_quickly(*prober);
  EXPECT_TRUE(prober->busy());
  EXPECT_FALSE(prober->start().ok()) << "a second round started while one was running";
  ASSERT_EQ(wait_round(*prober).size(), 1u);
  EXPECT_FALSE(prober->busy());
  EXPECT_EQ(slow.calls(), 1);
}

TEST(DevicePluginProber, DirectoryWithoutPluginsGivesAnEmptyRoundAtOnce) {
  test::TempDir dir("gdw-plugins");
  test::FakeDevicePlugin kubelet(dir / "kubelet.sock");
  auto prober = prober_for(dir.path(), 1000ms);

  start_quickly(*prober);
  EXPECT_TRUE(test::readable_now(prober->fd()));
  EXPECT_TRUE(wait_round(*prober, 0ms).empty());
}

TEST(DevicePluginProber, MissingDirectoryIsAnError) {
  test::TempDir dir("gdw-plugins");
  auto prober = prober_for(dir / "device-plugins", 1000ms);

  Status started = prober->start();
  ASSERT_FALSE(started.ok());
  EXPECT_NE(started.error().message.find(dir / "device-plugins"), std::string::npos) << started.error().message;
  EXPECT_FALSE(prober->busy());
}

TEST(DevicePluginProber, DestroyingItWithProbesToHungPluginsReturnsPromptly) {
  test::TempDir dir("gdw-plugins");
  test::SilentSocket hung_a(dir / "a.sock");
  test::SilentSocket hung_b(dir / "b.sock");
  auto prober = prober_for(dir.path(), 60000ms);
  start_quickly(*prober);

  const auto before = Clock::now();
  prober.reset();
  EXPECT_LT(Clock::now() - before, 500ms);
}

}  // namespace
}  // namespace gdw
