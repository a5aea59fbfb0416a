// Stale-checkpoint remediation: the checkpoint is moved aside (kept, never overwritten) and
// the kubelet restart goes over D-Bus asynchronously. No test talks to the host's system
// bus: the buses here are missing, private (a dbus-daemon without systemd) or silent.
#include "kubeletapi/remediation.h"

#include <systemd/sd-event.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <chrono>
#include <fstream>

#include "support/kubelet_grpc_fakes.h"
#include "support/process.h"
#include "support/temp_dir.h"

namespace gdw {
namespace {

using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;

// 2025-01-31 23:59:59 UTC
const auto kNow = std::chrono::system_clock::from_time_t(1738367999);

bool exists(const std::string& path) { return ::access(path.c_str(), F_OK) == 0; }

::testing::AssertionResult contains(const std::string& text, const std::string& part) {
  if (text.find(part) != std::string::npos) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure() << "\"" << text << "\" does not contain \"" << part << "\"";
}

class Loop {
 public:
  Loop() { EXPECT_GE(sd_event_new(&event_), 0); }
  ~Loop() { sd_event_unref(event_); }
  sd_event* get() { return event_; }
  // Runs the loop until `done` or the timeout; true when done.
  template <class Pred>
  bool run_until(Pred done, std::chrono::milliseconds timeout) {
    const auto end = Clock::now() + timeout;
    while (!done() && Clock::now() < end) sd_event_run(event_, 20'000);
    return done();
  }

 private:
  sd_event* event_ = nullptr;
};

struct RestartOutcome {
  std::optional<Result<std::string>> job;
  Clock::time_point at;
};

UnitRestart::Done record_into(RestartOutcome& out) {
  return [&out](Result<std::string> job) {
    out.job = std::move(job);
    out.at = Clock::now();
  };
}

TEST(MoveCheckpointAside, RenamesWithAUtcStampAndKeepsTheFile) {
  test::TempDir kubelet("gdw-kubelet");
  const std::string checkpoint = kubelet.write("device-plugins/kubelet_internal_checkpoint", R"({"Data":{}})");

  auto moved = move_checkpoint_aside(checkpoint, kNow);

  ASSERT_TRUE(moved.ok()) << moved.error().message;
  EXPECT_EQ(*moved, checkpoint + ".stale-20250131T235959Z");
  EXPECT_FALSE(exists(checkpoint));
  EXPECT_EQ(test::read_file(*moved), R"({"Data":{}})");
}

TEST(MoveCheckpointAside, NeverOverwritesAnEarlierStaleCopy) {
  test::TempDir kubelet("gdw-kubelet");
  const std::string checkpoint = kubelet.write("kubelet_internal_checkpoint", "first");
  ASSERT_TRUE(move_checkpoint_aside(checkpoint, kNow).ok());
  test::write_file(checkpoint, "second");

  auto again = move_checkpoint_aside(checkpoint, kNow);

  ASSERT_FALSE(again.ok());
  EXPECT_TRUE(contains(again.error().message, checkpoint));
  EXPECT_EQ(test::read_file(checkpoint), "second");
  EXPECT_EQ(test::read_file(checkpoint + ".stale-20250131T235959Z"), "first");
}

TEST(MoveCheckpointAside, MissingCheckpointIsAnError) {
  test::TempDir kubelet("gdw-kubelet");
  auto moved = move_checkpoint_aside(kubelet / "kubelet_internal_checkpoint", kNow);
  ASSERT_FALSE(moved.ok());
  EXPECT_TRUE(contains(moved.error().message, "No such file or directory"));
}

TEST(Remediation, MovesTheCheckpointEvenWhenTheBusIsMissing) {
  test::TempDir kubelet("gdw-kubelet");
  const std::string checkpoint = kubelet.write("kubelet_internal_checkpoint", "stale");
  const std::string bus = "unix:path=" + (kubelet / "no-bus");
  Loop loop;
  RestartOutcome outcome;

  auto started = start_remediation(loop.get(), {checkpoint, {bus, "kubelet.service", 2000ms}}, kNow,
                                   record_into(outcome));

  ASSERT_TRUE(started.ok()) << started.error().message;
  EXPECT_FALSE(outcome.job.has_value()) << "done ran inside start_remediation()";
  EXPECT_EQ(started->moved_to, checkpoint + ".stale-20250131T235959Z");
  ASSERT_TRUE(loop.run_until([&] { return outcome.job.has_value(); }, 2s));
  ASSERT_FALSE(outcome.job->ok());
  EXPECT_TRUE(contains(outcome.job->error().message, "RestartUnit(kubelet.service) on " + bus));
  EXPECT_TRUE(contains(outcome.job->error().message, "No such file or directory"));
  EXPECT_FALSE(exists(checkpoint));
  EXPECT_EQ(test::read_file(started->moved_to), "stale");
}

TEST(Remediation, NothingIsRestartedWhenTheMoveFails) {
  test::TempDir kubelet("gdw-kubelet");
  Loop loop;
  RestartOutcome outcome;

  auto started = start_remediation(loop.get(),
                                   {kubelet / "kubelet_internal_checkpoint", {"unix:path=/nonexistent", "kubelet.service", 2000ms}},
                                   kNow, record_into(outcome));

  ASSERT_FALSE(started.ok());
  EXPECT_TRUE(contains(started.error().message, "moving"));
  loop.run_until([] { return false; }, 100ms);
  EXPECT_FALSE(outcome.job.has_value());
}

// A private bus with no systemd on it: RestartUnit gets D-Bus's own error back.
TEST(UnitRestart, DBusErrorFromABusWithoutSystemdSurfaces) {
  test::TempDir dir("gdw-dbus");
  const std::string socket = dir / "bus";
  const std::string config = dir.write("bus.conf", R"(<!DOCTYPE busconfig PUBLIC "-//freedesktop//DTD D-Bus Bus Configuration 1.0//EN"
 "http://www.freedesktop.org/standards/dbus/1.0/busconfig.dtd">
<busconfig>
  <type>session</type>
  <listen>unix:path=)" + socket + R"(</listen>
  <auth>EXTERNAL</auth>
  <policy context="default">
    <allow send_destination="*" eavesdrop="true"/>
    <allow eavesdrop="true"/>
    <allow own="*"/>
  </policy>
</busconfig>
)");
  if (test::run_command({"sh", "-c", "command -v dbus-daemon"}, 10s).exit_code != 0) {
    GTEST_SKIP() << "dbus-daemon is not installed (package dbus)";
  }
  // It prints its address once it accepts connections (the socket file appears earlier).
  test::BackgroundProcess daemon(
      {"dbus-daemon", "--config-file=" + config, "--nofork", "--nopidfile", "--print-address=1"});
  ASSERT_TRUE(daemon.wait_for_output("unix:path=" + socket, 10s)) << daemon.output();
  Loop loop;
  RestartOutcome outcome;

  auto restart = UnitRestart::start(loop.get(), {"unix:path=" + socket, "kubelet.service", 5000ms}, record_into(outcome));

  ASSERT_TRUE(restart.ok()) << restart.error().message;
  ASSERT_TRUE(loop.run_until([&] { return outcome.job.has_value(); }, 10s));
  ASSERT_FALSE(outcome.job->ok());
  EXPECT_TRUE(contains(outcome.job->error().message, "org.freedesktop.DBus.Error.ServiceUnknown"));
  EXPECT_TRUE(contains(outcome.job->error().message, "org.freedesktop.systemd1"));
}

TEST(UnitRestart, SilentBusCostsOnlyTheTimeout) {
  test::TempDir dir("gdw-dbus");
  test::SilentSocket bus(dir / "bus");
  Loop loop;
  RestartOutcome outcome;

  // A bus timeout long enough that a loaded 2-CPU machine running the suite in parallel
  // cannot blur "start() waited for it" with scheduling delay (a 100 ms bound on a 300 ms
  // timeout failed there once).
  const auto before = Clock::now();
  auto restart = UnitRestart::start(loop.get(), {"unix:path=" + (dir / "bus"), "kubelet.service", 2000ms},
                                    record_into(outcome));
  EXPECT_LT(Clock::now() - before, 1000ms) << "start() waited for the bus";

  ASSERT_TRUE(restart.ok()) << restart.error().message;
  ASSERT_TRUE(loop.run_until([&] { return outcome.job.has_value(); }, 10s));
  ASSERT_FALSE(outcome.job->ok());
  EXPECT_TRUE(contains(outcome.job->error().message, "no answer within 2s"));
  EXPECT_GE(outcome.at - before, 1990ms);
  EXPECT_LT(outcome.at - before, 5000ms);
}

TEST(UnitRestart, DoneMayDestroyTheRestart) {
  test::TempDir dir("gdw-dbus");
  Loop loop;
  std::unique_ptr<UnitRestart> restart;
  bool called = false;

  auto started = UnitRestart::start(loop.get(), {"unix:path=" + (dir / "no-bus"), "kubelet.service", 1000ms},
                                    [&](Result<std::string>) {
                                      called = true;
                                      restart.reset();
                                    });
  ASSERT_TRUE(started.ok());
  restart = std::move(*started);

  ASSERT_TRUE(loop.run_until([&] { return called; }, 2s));
  EXPECT_EQ(restart, nullptr);
  loop.run_until([] { return false; }, 50ms);  // the loop survives the source freed in its callback
}

}  // namespace
}  // namespace gdw
