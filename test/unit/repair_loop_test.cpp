// The daemon's repair loop (service/repair_loop.h) driven by an in-memory device policy
// (support/fake_device_access.h) on a real sd-event loop: what a check grants, counts and
// returns to its owner, without root or a cgroup.
#include "service/repair_loop.h"

#include "metrics/metrics.h"

#include <signal.h>
#include <cerrno>
#include <sys/eventfd.h>
#include <sys/wait.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include "support/fake_device_access.h"
#include "support/metrics_text.h"

namespace gdw {
namespace {

using std::chrono::milliseconds;
using test::FakeDeviceAccess;
using test::metric_value;

WantedDevice dev(std::uint32_t minor, const std::string& name) {
  return WantedDevice{DeviceNumber{DeviceType::kChar, 195, minor}, kAccessReadWrite, name, "test"};
}
const WantedDevice kGpu0 = dev(0, "nvidia0");
const WantedDevice kCtl = dev(255, "nvidiactl");
const std::string kDir = "/kubepods/pod1/c1";
const std::map<std::string, std::string> kPod = {{"namespace", "ns"}, {"pod", "p"}, {"container", "c"}};

// The probe's record of `a` written to devices.deny (a runc or systemd re-apply).
RuleWriteEvent deny_all_at(Clock::time_point at) {
  RuleWriteEvent ev;
  ev.writer.pid = 0x3fffffff;  // not us, and no such process
  ev.writer.comm = "runc";
  ev.target_cgroup_id = 4242;
  ev.deny = true;
  ev.rule = "a";
  ev.ktime_ns = static_cast<std::uint64_t>(std::chrono::duration_cast<std::chrono::nanoseconds>(at.time_since_epoch()).count());
  return ev;
}

class RepairLoopTest : public ::testing::Test {
 protected:
  void SetUp() override {
    config.repair.burst = 3;
    config.repair.max_per_minute = 60;
    settings = RepairSettings::from(config);
    auto created = EventLoop::create();
    ASSERT_TRUE(created);
    loop = std::move(*created);
    repair.emplace(config, settings, *loop, containers, metrics, attribution);
    DiscoveredContainer cg;
    cg.cgroup_dir = kDir;
    cg.pod.pod_uid = "uid-1";
    w = &containers.upsert(cg, config).first;
    w->target.kind = TargetKind::kGpu;
    w->target.desired.wanted = {kGpu0, kCtl};
    w->labels = {"ns", "p", "c"};
    containers.set_cgroup_id(*w, 4242);
  }

  double metric(const std::string& name, const std::map<std::string, std::string>& labels = {}) {
    return metric_value(metrics.render(), name, labels).value_or(0);
  }
  // Runs the loop for `d`: timers due by then fire.
  void run_for(Clock::duration d) {
    auto stop = loop->add_timer([this] { loop->exit(0); }, "test-stop");
    ASSERT_TRUE(stop);
    ASSERT_TRUE(stop->arm(std::chrono::duration_cast<std::chrono::microseconds>(d)));
    loop->run();
  }
  // One check, as the fleet runs it; what it asks for is recorded.
  bool check(const CheckCause& cause = {}) { return check_at(Clock::now(), cause); }
  bool check_at(Clock::time_point trigger, const CheckCause& cause = {}) {
    CheckOutcome outcome = repair->check(access, *w, trigger, cause);
    const auto now = Clock::now();
    EXPECT_TRUE(outcome.granted.empty()) << "no systemd scope here: nothing to persist";
    if (outcome.gone) {
      gone.push_back(kDir);
      return false;
    }
    if (outcome.retry_at) retries.push_back(*outcome.retry_at - now);
    prepare_asked += outcome.prepare_next_grant;
    ++checked;
    return true;
  }

  Config config;
  RepairSettings settings;
  std::unique_ptr<EventLoop> loop;
  ContainerTable containers;
  Metrics metrics;
  Attribution attribution{containers, ProbeMetrics(metrics)};
  std::optional<RepairLoop> repair;
  FakeDeviceAccess access;
  WatchedContainer* w = nullptr;
  std::vector<std::string> gone;
  std::vector<Clock::duration> retries;
  int checked = 0;
  int prepare_asked = 0;  // checks that asked the owner to prepare the next grant
};

// A process of this test's to name as a device program's attacher (the daemon leaves its
// own pid out): it sleeps until killed.
class Attacher {
 public:
  Attacher() : pid_(::fork()) {
    if (pid_ == 0) {
      ::pause();
      ::_exit(0);
    }
  }
  ~Attacher() { end(); }
  pid_t pid() const { return pid_; }
  void end() {
    if (pid_ <= 0) return;
    ::kill(pid_, SIGKILL);
    ::waitpid(pid_, nullptr, 0);
    pid_ = -1;
  }

 private:
  pid_t pid_;
};

DeviceProgramEvent attach_by(pid_t pid) {
  DeviceProgramEvent ev;
  ev.caller.pid = pid;
  ev.caller.comm = "runc";
  ev.target_cgroup_id = 4242;
  ev.prog_id = 77;
  ev.ktime_ns = static_cast<std::uint64_t>(
      std::chrono::duration_cast<std::chrono::nanoseconds>(Clock::now().time_since_epoch()).count());
  return ev;
}

std::string exe_link(const std::string& link) {
  char buf[4096];
  const ssize_t n = ::readlink(link.c_str(), buf, sizeof buf - 1);
  return n > 0 ? std::string(buf, static_cast<std::size_t>(n)) : std::string();
}
std::string own_exe() { return exe_link("/proc/self/exe"); }
std::string exe_of(pid_t pid) { return exe_link("/proc/" + std::to_string(pid) + "/exe"); }

TEST_F(RepairLoopTest, GrantsWhatIsMissingAndCountsDriftAndRegrants) {
  access.allowed[kDir] = {kCtl.dev};
  EXPECT_TRUE(check());
  EXPECT_EQ(access.allowed[kDir].count(kGpu0.dev), 1u) << "nvidia0 granted back";
  EXPECT_EQ(metric("gpu_devwatch_drift_total", {{"device", "nvidia0"}}), 1);
  EXPECT_EQ(metric("gpu_devwatch_regrants_total", {{"result", "success"}, {"method", "fake"}}), 1);
  EXPECT_EQ(metric("gpu_devwatch_repair_duration_seconds_count"), 1);
  EXPECT_TRUE(w->repair.missing.empty());
  EXPECT_EQ(checked, 1);
  EXPECT_TRUE(w->unlogged.grants.empty()) << "no probe: the line goes out at once";

  check();
  EXPECT_EQ(access.grants, 1) << "nothing missing: nothing written";
  EXPECT_EQ(metric("gpu_devwatch_drift_total"), 1);
  EXPECT_EQ(checked, 2);
}

TEST_F(RepairLoopTest, AVanishedCgroupGoesBackToTheOwnerUncounted) {
  EXPECT_FALSE(check()) << "not in the fake: ENOENT";
  EXPECT_EQ(gone, std::vector<std::string>{kDir});
  EXPECT_EQ(checked, 0);
  EXPECT_EQ(metric("gpu_devwatch_drift_total"), 0);
}

TEST_F(RepairLoopTest, AnUnreadablePolicyIsAnErrorNotADrift) {
  access.allowed[kDir] = {};
  access.unreadable = {kDir};
  check();
  EXPECT_TRUE(gone.empty());
  EXPECT_EQ(access.grants, 0);
  EXPECT_EQ(metric("gpu_devwatch_event_loop_errors_total", {{"source", "fake"}}), 1);
}

TEST_F(RepairLoopTest, TheCauseHandedInIsNamedAndCountedOnlyWhenSomethingWentMissing) {
  access.allowed[kDir] = {kGpu0.dev, kCtl.dev};
  Revocation cause;
  cause.writer = "runc";
  cause.at = Clock::now();
  check({.revocation = &cause});
  EXPECT_FALSE(w->last_revocation) << "nothing missing: the change revoked nothing";
  EXPECT_EQ(metric("gpu_devwatch_revocations_total"), 0);

  access.allowed[kDir] = {kCtl.dev};
  const auto trigger = Clock::now();
  check_at(trigger, {.revocation = &cause});
  ASSERT_TRUE(w->last_revocation);
  EXPECT_EQ(w->last_revocation->writer, "runc");
  EXPECT_EQ(w->last_revocation->cause_of, trigger);
  EXPECT_EQ(metric("gpu_devwatch_revocations_total", {{"writer", "runc"}}), 1);
}

TEST_F(RepairLoopTest, AProgramAttachersExecutableIsReadByTheRepairNotBeforeIt) {
  Attacher attacher;
  ASSERT_GT(attacher.pid(), 0);
  const DeviceProgramEvent change = attach_by(attacher.pid());
  EXPECT_EQ(attribution.program_change(change), w);
  // Nothing read while the probe's records are drained: the grant comes first.
  const Revocation before_the_grant = attribution.program_change_cause(change);
  EXPECT_TRUE(before_the_grant.exe.empty());
  EXPECT_EQ(before_the_grant.writer, "runc") << "named from its comm until then";

  access.allowed[kDir] = {kCtl.dev};
  check({.program_change = &change});
  EXPECT_EQ(access.allowed[kDir].count(kGpu0.dev), 1u);
  ASSERT_TRUE(w->last_revocation);
  // The kernel's /proc/<pid>/exe of the attacher. Under qemu-user (the arm64 build's
  // tests on amd64) it names the emulator, which only /proc/self/exe hides from the
  // emulated process itself; natively it is this test's binary (the attacher is forked).
  const std::string attacher_exe = exe_of(attacher.pid());
  EXPECT_EQ(w->last_revocation->exe, attacher_exe);
  if (attacher_exe.find("/qemu-") == std::string::npos) {
    EXPECT_EQ(attacher_exe, own_exe()) << "the attacher's executable (this test, forked)";
  }
  EXPECT_EQ(w->last_revocation->writer, "runc");
  EXPECT_EQ(metric("gpu_devwatch_revocations_total", {{"writer", "runc"}}), 1);
}

TEST_F(RepairLoopTest, AProgramChangeThatTookNothingAwayNamesNobody) {
  Attacher attacher;
  ASSERT_GT(attacher.pid(), 0);
  const DeviceProgramEvent change = attach_by(attacher.pid());
  access.allowed[kDir] = {kGpu0.dev, kCtl.dev};
  check({.program_change = &change});
  EXPECT_FALSE(w->last_revocation);
  EXPECT_EQ(metric("gpu_devwatch_revocations_total"), 0);
}

// The look can start from the program itself only where the record names it, on the
// container's own cgroup, for an attach that did not fail, where a grant may follow.
TEST_F(RepairLoopTest, OnlyAnAttachToTheContainersOwnCgroupIsLookedAtThroughItsProgram) {
  Attacher attacher;
  ASSERT_GT(attacher.pid(), 0);
  DeviceProgramEvent change = attach_by(attacher.pid());
  change.flags = 2;  // BPF_F_ALLOW_MULTI
  access.allowed[kDir] = {kCtl.dev};
  check({.program_change = &change});
  ASSERT_EQ(access.attached_observes.size(), 1u);
  EXPECT_EQ(access.attached_observes[0].prog_id, 77u);
  EXPECT_EQ(access.attached_observes[0].attach_flags, 2u);
  EXPECT_EQ(access.grants, 1);
  EXPECT_TRUE(w->last_revocation) << "named as before";

  auto observes_whole = [&](const DeviceProgramEvent& ev, bool on_subgroup) {
    const std::size_t attached_before = access.attached_observes.size();
    const int observes_before = access.observes;
    access.allowed[kDir] = {kCtl.dev};
    check({.program_change = &ev, .program_change_on_subgroup = on_subgroup});
    return access.attached_observes.size() == attached_before && access.observes == observes_before + 1;
  };
  EXPECT_TRUE(observes_whole(change, true)) << "crun's sub-cgroup";
  DeviceProgramEvent failed = change;
  failed.result = -EPERM;
  EXPECT_TRUE(observes_whole(failed, false)) << "a failed attach";
  DeviceProgramEvent detach = change;
  detach.command = DeviceProgramEvent::Command::kProgDetach;
  EXPECT_TRUE(observes_whole(detach, false)) << "a detach";
  DeviceProgramEvent link = change;
  link.command = DeviceProgramEvent::Command::kLinkCreate;
  EXPECT_TRUE(observes_whole(link, false)) << "a link: a replace would not find its program";
  DeviceProgramEvent unnamed = change;
  unnamed.prog_id = 0;
  EXPECT_TRUE(observes_whole(unnamed, false)) << "no program named";
  config.mode = Mode::kObserve;
  settings = RepairSettings::from(config);
  EXPECT_TRUE(observes_whole(change, false)) << "observe mode: the whole look counts the programs";
}

TEST_F(RepairLoopTest, AnAttacherGoneBeforeTheRepairIsNamedFromItsComm) {
  Attacher attacher;
  ASSERT_GT(attacher.pid(), 0);
  const DeviceProgramEvent change = attach_by(attacher.pid());
  ASSERT_EQ(attribution.program_change(change), w);
  attacher.end();
  access.allowed[kDir] = {kCtl.dev};
  check({.program_change = &change});
  ASSERT_TRUE(w->last_revocation);
  EXPECT_TRUE(w->last_revocation->exe.empty());
  EXPECT_EQ(w->last_revocation->writer, "runc");
  EXPECT_EQ(metric("gpu_devwatch_revocations_total", {{"writer", "runc"}}), 1);
}

TEST_F(RepairLoopTest, AGrantWithWorkForTheNextOneAsksItsOwnerToRunItLater) {
  access.next_grant_work = true;
  access.allowed[kDir] = {kGpu0.dev, kCtl.dev};
  check();
  EXPECT_EQ(prepare_asked, 0) << "nothing granted";
  access.allowed[kDir] = {kCtl.dev};
  check();
  EXPECT_EQ(access.grants, 1);
  EXPECT_EQ(prepare_asked, 1) << "after the grant, for the owner to run later";
  access.next_grant_work = false;
  access.allowed[kDir] = {kCtl.dev};
  check();
  EXPECT_EQ(access.grants, 2);
  EXPECT_EQ(prepare_asked, 1) << "no work due: no timer, no wake-up for it";
}

TEST_F(RepairLoopTest, WithTheProbeTheLogLineWaitsForTheRevokerThenGoesOut) {
  repair->set_reporting(nullptr, /*probe_loaded=*/true);
  access.allowed[kDir] = {kCtl.dev};
  // The revoking write precedes the check it triggers; its record may come after it.
  const auto written = Clock::now();
  const auto trigger = written + milliseconds(1);
  check_at(trigger);
  EXPECT_EQ(access.allowed[kDir].count(kGpu0.dev), 1u) << "the repair itself never waits";
  ASSERT_EQ(w->unlogged.grants.size(), 1u);
  EXPECT_TRUE(w->log_timer.armed());

  // The probe's record arrives: the line goes out now, naming it.
  WatchedContainer* named = attribution.rule_write(deny_all_at(written));
  ASSERT_EQ(named, w);
  testing::internal::CaptureStderr();
  repair->revocation_named(*named);
  std::string line = testing::internal::GetCapturedStderr();
  EXPECT_NE(line.find("granted back nvidia0; revoked by runc (pid"), std::string::npos) << line;
  EXPECT_FALSE(w->log_timer.armed());
  EXPECT_EQ(metric("gpu_devwatch_revocations_total", {{"writer", "runc"}}), 1);

  // No record at all: the line goes out after the wait anyway, naming nobody.
  access.allowed[kDir] = {kCtl.dev};
  w->last_revocation.reset();
  testing::internal::CaptureStderr();
  check();
  EXPECT_EQ(testing::internal::GetCapturedStderr(), "") << "waiting for the probe's record";
  testing::internal::CaptureStderr();
  run_for(milliseconds(100));
  line = testing::internal::GetCapturedStderr();
  EXPECT_NE(line.find("granted back nvidia0"), std::string::npos) << line;
  EXPECT_EQ(line.find("revoked by"), std::string::npos) << line;
}

TEST_F(RepairLoopTest, ARefusedGrantIsRetriedAfterTheBackoffAndCountedAsAnError) {
  access.allowed[kDir] = {kCtl.dev};
  access.refused = {kGpu0.dev};
  check();
  EXPECT_EQ(metric("gpu_devwatch_regrants_total", {{"result", "error"}}), 1);
  ASSERT_EQ(retries.size(), 1u);
  EXPECT_GT(retries[0], std::chrono::seconds(29));
  EXPECT_LE(retries[0], settings.rejected_backoff);
  EXPECT_EQ(w->repair.missing.size(), 1u);
}

TEST_F(RepairLoopTest, ObserveModeGrantsNothing) {
  config.mode = Mode::kObserve;
  settings = RepairSettings::from(config);
  access.allowed[kDir] = {kCtl.dev};
  check();
  check();
  EXPECT_EQ(access.grants, 0);
  EXPECT_EQ(metric("gpu_devwatch_drift_total"), 1) << "a transition is counted once";
  EXPECT_EQ(checked, 2);
}

// The probe's records, one waiting unread: an eventfd with a count is readable as they are.
struct WaitingRecords {
  const int fd = ::eventfd(1, EFD_CLOEXEC);
  ~WaitingRecords() {
    if (fd >= 0) ::close(fd);
  }
};

TEST_F(RepairLoopTest, DevicesMissingWhileProbeRecordsWaitDeferTheGrantUnlessTheCheckFollowsARead) {
  const WaitingRecords waiting;
  ASSERT_GE(waiting.fd, 0);
  const int records = waiting.fd;
  access.allowed[kDir] = {kCtl.dev};
  const CheckOutcome first = repair->check(access, *w, Clock::now(), CheckCause{.records_fd = records});
  EXPECT_TRUE(first.deferred) << "a runtime's apply the records name may be under way";
  EXPECT_EQ(access.grants, 0);
  const CheckOutcome after_read =
      repair->check(access, *w, Clock::now(), CheckCause{.records_fd = records, .after_wait = true});
  EXPECT_FALSE(after_read.deferred) << "made right after a read: what waits came since";
  EXPECT_EQ(access.allowed[kDir].count(kGpu0.dev), 1u);
}

TEST_F(RepairLoopTest, ObserveModeNeverDefersOnWaitingRecords) {
  config.mode = Mode::kObserve;
  settings = RepairSettings::from(config);
  const WaitingRecords waiting;
  ASSERT_GE(waiting.fd, 0);
  access.allowed[kDir] = {kCtl.dev};
  const CheckOutcome outcome = repair->check(access, *w, Clock::now(), CheckCause{.records_fd = waiting.fd});
  EXPECT_FALSE(outcome.deferred) << "observe grants nothing, so it has nothing to hold back";
  EXPECT_EQ(access.grants, 0);
  EXPECT_EQ(metric("gpu_devwatch_drift_total"), 1) << "the drift is seen and counted";
}

TEST_F(RepairLoopTest, AFightLoopBeyondTheBurstIsHeldBackAndRetriedLater) {
  for (int i = 0; i < 3; ++i) {
    access.allowed[kDir] = {kCtl.dev};
    check();
  }
  EXPECT_EQ(access.grants, 3);
  access.allowed[kDir] = {kCtl.dev};
  check();
  EXPECT_EQ(access.grants, 3) << "the bucket of 3 is empty";
  EXPECT_EQ(metric("gpu_devwatch_repairs_throttled_total", kPod), 1);
  ASSERT_FALSE(retries.empty());
  EXPECT_LE(retries.back(), std::chrono::seconds(1)) << "the next token, at 60/min";
}

TEST_F(RepairLoopTest, RepairsBeyondTheLogBurstAreCountedInOneSummaryLine) {
  config.repair.log_burst = 1;
  config.repair.log_interval = milliseconds(50);
  containers.erase(kDir);
  DiscoveredContainer cg;
  cg.cgroup_dir = kDir;
  w = &containers.upsert(cg, config).first;
  w->target.kind = TargetKind::kGpu;
  w->target.desired.wanted = {kGpu0};
  for (int i = 0; i < 3; ++i) {
    access.allowed[kDir] = {};
    check();
  }
  EXPECT_EQ(access.grants, 3) << "every repair made";
  testing::internal::CaptureStderr();
  run_for(milliseconds(200));
  const std::string lines = testing::internal::GetCapturedStderr();
  EXPECT_NE(lines.find("devices granted back again: 2 more repairs in the last"), std::string::npos) << lines;
}

TEST_F(RepairLoopTest, EveryDeviceDeniedAfterTheLastCheckIsGrantedWithoutReadingThePolicy) {
  access.allowed[kDir] = {};
  ASSERT_EQ(attribution.rule_write(deny_all_at(Clock::now())), w);
  check();
  EXPECT_EQ(access.observes, 0) << "the record says what is missing: all of it";
  EXPECT_EQ(access.allowed[kDir], (std::set<DeviceNumber>{kGpu0.dev, kCtl.dev}));
  EXPECT_EQ(metric("gpu_devwatch_drift_total", {{"device", "nvidia0"}}), 1);
  EXPECT_EQ(metric("gpu_devwatch_drift_total", {{"device", "nvidiactl"}}), 1);

  // The record is used once: the next check reads the policy, and finds nothing to do.
  check();
  EXPECT_EQ(access.observes, 1);
  EXPECT_EQ(access.grants, 1);
}

TEST_F(RepairLoopTest, ADenyRecordReadAfterACheckThatCameLaterIsNotTakenAsMissing) {
  // The check ran after the write (it saw its result and repaired it); the record was
  // read only afterwards (a drain budget spent). It must not make a later check assume
  // that everything is missing again.
  const auto written = Clock::now();
  access.allowed[kDir] = {kCtl.dev};
  check();
  ASSERT_EQ(access.observes, 1);
  ASSERT_EQ(attribution.rule_write(deny_all_at(written)), w);
  check();
  EXPECT_EQ(access.observes, 2) << "read, not assumed";
  EXPECT_EQ(access.grants, 1) << "nothing was missing";
  EXPECT_EQ(metric("gpu_devwatch_drift_total"), 1);
}

TEST_F(RepairLoopTest, ObserveModeReadsThePolicyEvenAfterEveryDeviceWasDenied) {
  config.mode = Mode::kObserve;
  settings = RepairSettings::from(config);
  access.allowed[kDir] = {kGpu0.dev, kCtl.dev};  // re-allowed since: nothing to report
  ASSERT_EQ(attribution.rule_write(deny_all_at(Clock::now())), w);
  check();
  EXPECT_EQ(access.observes, 1);
  EXPECT_EQ(metric("gpu_devwatch_drift_total"), 0);
}

}  // namespace
}  // namespace gdw
