// What the tests of "never inside a writer's apply" check, on the real daemon: while a
// runtime or hook that took a GPU container's device is still at work, the device stays
// denied; once it has exited, the device is back and the wait is counted as ended by that
// exit, never by the limit.
#pragma once

#include <gtest/gtest.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <functional>
#include <string>
#include <thread>

#include "support/daemon_harness.h"
#include "support/process.h"
#include "support/sandbox_node.h"

namespace gdw::test {

// Why a node of these tests cannot run here, or "" when it can.
inline std::string apply_wait_unavailable(bool v2) {
  if (::geteuid() == 0 && SandboxNode::available(v2) && (!v2 || SandboxNode::v2_unavailable_reason().empty()))
    return "";
  return std::string("needs root and the cgroup ") + (v2 ? "v2 hierarchy with device programs" : "v1 devices hierarchy");
}

inline SandboxNode::Options apply_wait_node(bool v2, bool systemd_naming, const char* tag) {
  SandboxNode::Options options;
  options.v2 = v2;
  options.systemd_naming = systemd_naming;
  options.tag = tag;
  return options;
}

// A container holding GPU 0, written to the checkpoint.
inline const SandboxContainer& add_gpu_container(SandboxNode& node) {
  SandboxContainerSpec spec;
  spec.device_ids = {node.gpu_uuid(0)};
  const SandboxContainer& c = node.add_container(spec);
  node.write_checkpoint();
  return c;
}

// The probe records `daemon` has read so far (gpu_devwatch_probe_record_delay_seconds).
inline double probe_records_read(const DaemonHarness& daemon) {
  return daemon.metric("gpu_devwatch_probe_record_delay_seconds_count");
}

// Until `daemon` has read more probe records than `before` (probe_records_read() before a
// runtime's re-apply): from then on it waits for that runtime. What a test does next
// reaches it in a later read; in the same read as the runtime's attach, a tenant's load
// inside that container is not looked at (the attach is checked anyway).
inline ::testing::AssertionResult reads_past(DaemonHarness& daemon, double before) {
  if (eventually([&] { return probe_records_read(daemon) > before; })) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure() << "the daemon read no probe record past " << before << "\n"
                                       << daemon.metrics();
}

// A look at `c`'s nvidia0 every 20 ms for `span`: every one must be denied (EPERM); one
// allowed is a grant inside `whose` apply.
inline ::testing::AssertionResult stays_denied(SandboxNode& node, const SandboxContainer& c, DaemonHarness& daemon,
                                               std::chrono::milliseconds span, const std::string& whose) {
  const auto until = std::chrono::steady_clock::now() + span;
  for (int looks = 0; std::chrono::steady_clock::now() < until; ++looks) {
    if (const int e = node.open_errno(c, "nvidia0"); e != EPERM)
      return ::testing::AssertionFailure() << "granted inside " << whose << "'s apply (look " << looks << ", errno "
                                           << e << ")\n" << daemon.output() << daemon.metrics();
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  return ::testing::AssertionSuccess();
}

// After `whose` exit: nvidia0 granted, nvidia1 (not allocated) never, and the wait counted.
inline void expect_granted_after_writer_exit(SandboxNode& node, const SandboxContainer& c, DaemonHarness& daemon,
                                             const std::string& whose) {
  EXPECT_TRUE(daemon.eventually_errno(c, "nvidia0", ENXIO)) << "not granted once " << whose << " exited\n"
                                                            << daemon.output();
  EXPECT_EQ(node.open_errno(c, "nvidia1"), EPERM) << "not allocated: never granted";
  // Counted once the grant is made and the CPU handed over: a look right after may come first.
  EXPECT_TRUE(eventually([&] { return daemon.metric("gpu_devwatch_apply_waits_total", {{"until", "writer_exit"}}) >= 1; }))
      << daemon.metrics();
  EXPECT_EQ(daemon.metric("gpu_devwatch_apply_waits_total", {{"until", "limit"}}), 0) << daemon.output();
}

// `check --repair` run while a runtime's apply to `c` (`whose`) goes on: nvidia0 stays denied
// and check keeps waiting for 300 ms; `end_apply` ends the apply, and check then grants
// nvidia0 (never nvidia1, not allocated) without a word of the limit.
inline void expect_check_waits_for_apply(SandboxNode& node, const SandboxContainer& c, const std::string& whose,
                                         const std::function<void()>& end_apply) {
  ASSERT_EQ(node.open_errno(c, "nvidia0"), EPERM) << "the spec lacks the GPU";
  BackgroundProcess check({GDW_BINARY, "check", "--repair", "--config", node.write_config()});
  const auto until = std::chrono::steady_clock::now() + std::chrono::milliseconds(300);
  for (int look = 0; std::chrono::steady_clock::now() < until; ++look) {
    ASSERT_EQ(node.open_errno(c, "nvidia0"), EPERM) << "granted inside " << whose << " (look " << look << ")\n"
                                                    << check.output();
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  EXPECT_TRUE(check.running()) << "check --repair did not wait for " << whose << "\n" << check.output();
  end_apply();
  EXPECT_EQ(check.wait(std::chrono::seconds(5)), 0) << check.output();
  EXPECT_NE(check.output().find("granted nvidia0"), std::string::npos) << check.output();
  EXPECT_EQ(check.output().find("repaired though"), std::string::npos) << check.output();
  EXPECT_EQ(node.open_errno(c, "nvidia0"), ENXIO);
  EXPECT_EQ(node.open_errno(c, "nvidia1"), EPERM) << "not allocated";
}

}  // namespace gdw::test
