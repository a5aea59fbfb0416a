// Issue 22, goal 3: attribution and impact from the first moment, on cgroup v1 and v2.
//  - A revocation made as soon as /metrics first answers is named: a writer calling itself
//    `runc` writes `a *:* rwm` to the GPU container's devices.deny (v1), or loads and
//    attaches a spec-only device program to its cgroup (v2), within a millisecond or two of
//    that first answer. The repair's log line names it and gpu_devwatch_revocations_total
//    has a series for it, as for the same write made later.
//  - In observe mode, every denied open of a GPU container's nodes is counted, from the
//    first one after the revocation: 3 rounds of open() on 3 denied nodes count 9.
// The default configuration apart from the node's paths (and mode: observe).
#include <gtest/gtest.h>
#include <signal.h>

#include <cerrno>
#include <chrono>
#include <cstdio>
#include <map>
#include <memory>
#include <thread>

#include "support/daemon_harness.h"
#include "support/device_program_tools.h"

namespace gdw::test {
namespace {

using Clock = std::chrono::steady_clock;

constexpr int kAttributionRounds = 3;
const std::vector<std::string> kDeniedNodes = {"nvidia0", "nvidiactl", "nvidia-uvm"};
const std::map<std::string, std::string> kTrainer = {{"namespace", "ml"}, {"pod", "trainer-0"}, {"container", "trainer"}};

class FirstMoment : public ::testing::TestWithParam<bool> {
 protected:
  bool v2() const { return GetParam(); }
  void SetUp() override {
    if (v2()) {
      if (auto why = SandboxNode::v2_unavailable_reason(); !why.empty()) GTEST_SKIP() << why;
    } else if (!SandboxNode::available(false)) {
      GTEST_SKIP() << "needs root and a writable cgroup v1 devices hierarchy";
    }
  }

  std::unique_ptr<SandboxNode> make_node() {
    auto node = std::make_unique<SandboxNode>(SandboxNode::Options{.v2 = v2()});
    node->add_container({.pod_namespace = "ml", .pod_name = "trainer-0", .container_name = "trainer",
                         .device_ids = {node->gpu_uuid(0)}});
    node->write_checkpoint();
    return node;
  }

  // The writer `runc` revokes everything: v1 `a *:* rwm` to devices.deny, v2 a program
  // allowing only the spec's devices, ANDed on. Returns 0 or the failing step's errno.
  int revoke_as_runc(const SandboxContainer& c) const {
    return v2() ? attach_as("runc", c.cgroup_dir, SandboxNode::spec_rules())
                : deny_as("runc", c.cgroup_dir, "a *:* rwm");
  }
};

TEST_P(FirstMoment, ARevocationAtTheFirstMetricsAnswerIsNamed) {
  for (int round = 0; round < kAttributionRounds; ++round) {
    SCOPED_TRACE("round " + std::to_string(round));
    auto node = make_node();
    const auto& c = node->containers().front();
    const int port = free_port();
    const std::string config = node->write_config("metrics:\n  listen: 127.0.0.1:" + std::to_string(port) + "\n");
    BackgroundProcess daemon({GDW_BINARY, "run", "--config", config});
    const auto started = Clock::now();
    ASSERT_TRUE(eventually([&] { return !http_get(port).empty(); }, std::chrono::seconds(15))) << daemon.output();
    const auto answered = Clock::now();
    ASSERT_EQ(revoke_as_runc(c), 0);
    const auto revoked = Clock::now();
    std::printf("[ observed ] round %d: /metrics answered %.1f ms after the start; revoked %.2f ms after that\n", round,
                std::chrono::duration<double, std::milli>(answered - started).count(),
                std::chrono::duration<double, std::milli>(revoked - answered).count());

    EXPECT_TRUE(eventually([&] { return node->open_errno(c, "nvidia0") == ENXIO; }, std::chrono::seconds(3)))
        << daemon.output();
    if (metric_value(http_get(port), "gpu_devwatch_probe_loaded") != 1)
      GTEST_SKIP() << "the eBPF probe could not load here:\n" << daemon.output();
    EXPECT_TRUE(daemon.wait_for_output("revoked by runc (pid", std::chrono::seconds(3)))
        << "the repair's log line names nobody:\n" << daemon.output();
    EXPECT_TRUE(eventually([&] {
      return metric_value(http_get(port), "gpu_devwatch_revocations_total", {{"writer", "runc"}}).value_or(0) >= 1;
    }, std::chrono::seconds(2))) << "no revocations_total series for runc\n" << http_get(port);
    daemon.signal(SIGTERM);
    EXPECT_EQ(daemon.wait(std::chrono::seconds(10)), 0) << daemon.output();
    if (HasFailure()) break;
  }
}

TEST_P(FirstMoment, ObserveModeCountsEveryDeniedOpenFromTheFirstRound) {
  auto node = make_node();
  const auto& c = node->containers().front();
  DaemonHarness daemon(*node);
  ASSERT_TRUE(daemon.start("mode: observe\n", /*probe=*/true)) << daemon.output();
  if (daemon.metric("gpu_devwatch_probe_loaded") != 1) GTEST_SKIP() << "the eBPF probe could not load here";
  ASSERT_TRUE(eventually([&] { return daemon.metric("gpu_devwatch_containers_watched") == 1; })) << daemon.output();

  node->reapply_spec(c);  // v1: deny `a`, then the spec; v2: systemd's program ANDed on
  for (int round = 0; round < 3; ++round) {
    if (round > 0) std::this_thread::sleep_for(std::chrono::milliseconds(100));
    for (const auto& name : kDeniedNodes) EXPECT_EQ(node->open_errno(c, name), EPERM) << name << " round " << round;
  }
  const bool nine = eventually([&] { return daemon.metric("gpu_devwatch_denied_opens_total", kTrainer) == 9; },
                               std::chrono::seconds(3));
  std::this_thread::sleep_for(std::chrono::milliseconds(300));  // and no more come
  std::printf("[ observed ] denied opens counted: %.0f (nvidia0 %.0f, nvidiactl %.0f, nvidia-uvm %.0f, other %.0f)\n",
              daemon.metric("gpu_devwatch_denied_opens_total", kTrainer),
              daemon.metric("gpu_devwatch_denied_opens_total", {{"pod", "trainer-0"}, {"device", "nvidia0"}}),
              daemon.metric("gpu_devwatch_denied_opens_total", {{"pod", "trainer-0"}, {"device", "nvidiactl"}}),
              daemon.metric("gpu_devwatch_denied_opens_total", {{"pod", "trainer-0"}, {"device", "nvidia-uvm"}}),
              daemon.metric("gpu_devwatch_denied_opens_total", {{"pod", "trainer-0"}, {"device", "other"}}));
  EXPECT_TRUE(nine) << daemon.metrics();
  EXPECT_EQ(daemon.metric("gpu_devwatch_denied_opens_total", kTrainer), 9) << "3 rounds of 3 denied opens";
  EXPECT_EQ(node->open_errno(c, "nvidia0"), EPERM) << "observe mode repairs nothing";
}

INSTANTIATE_TEST_SUITE_P(CgroupVersions, FirstMoment, ::testing::Values(false, true),
                         [](const auto& info) { return std::string(info.param ? "v2" : "v1"); });

}  // namespace
}  // namespace gdw::test
