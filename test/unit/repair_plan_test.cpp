// The repair planner (core/repair_plan.h), the attribution resolver (core/revocation.h) and
// one pass of the repair loop (service/repair_step.h) on an in-memory device policy: every
// decision the daemon's repair makes, without root or a cgroup.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cerrno>
#include <map>

#include "core/repair_plan.h"
#include "core/revocation.h"
#include "service/repair_step.h"
#include "support/fake_device_access.h"

namespace gdw {
namespace {

using std::chrono::milliseconds;
using std::chrono::seconds;

WantedDevice dev(std::uint32_t minor, const std::string& name) {
  return WantedDevice{DeviceNumber{DeviceType::kChar, 195, minor}, kAccessReadWrite, name, "test"};
}
const WantedDevice kGpu0 = dev(0, "nvidia0");
const WantedDevice kGpu1 = dev(1, "nvidia1");
const WantedDevice kCtl = dev(255, "nvidiactl");

const Clock::time_point kT0 = Clock::time_point(seconds(1000));

RepairSettings settings(Mode mode = Mode::kEnforce) {
  RepairSettings s;
  s.mode = mode;
  s.rejected_backoff = seconds(30);
  s.systemd_timeout = seconds(5);
  return s;
}

RepairState fresh(std::uint32_t burst = 100, std::uint32_t per_minute = 600) {
  return RepairState(RepairBudget(burst, per_minute));
}

std::vector<std::string> names(const std::vector<WantedDevice>& devices) {
  std::vector<std::string> out;
  for (const auto& d : devices) out.push_back(d.name);
  return out;
}

// ---- drift ---------------------------------------------------------------------------

struct DriftCase {
  const char* name;
  std::vector<WantedDevice> missing_before;  // as of the last check
  std::vector<WantedDevice> missing_now;
  Clock::duration quiet_left;                // > 0: within systemd's quiet window
  std::vector<std::string> drifted;
};

class Drift : public ::testing::TestWithParam<DriftCase> {};

TEST_P(Drift, IsATransitionOutsideTheQuietWindow) {
  const DriftCase& c = GetParam();
  RepairState state = fresh();
  for (const auto& d : c.missing_before) state.missing.insert(d.dev);
  state.quiet_until = kT0 + c.quiet_left;
  RepairPlan plan = plan_repair(state, c.missing_now, kT0, settings());
  EXPECT_EQ(names(plan.drifted), c.drifted);
  EXPECT_EQ(state.missing.size(), c.missing_now.size()) << "the state remembers what is missing now";
  EXPECT_EQ(names(plan.grant), names(c.missing_now)) << "everything missing is granted, drift or not";
}

INSTANTIATE_TEST_SUITE_P(
    , Drift,
    ::testing::Values(DriftCase{"NothingMissing", {}, {}, {}, {}},
                      DriftCase{"NewlyMissing", {}, {kGpu0, kCtl}, {}, {"nvidia0", "nvidiactl"}},
                      DriftCase{"StillMissingIsNotCountedAgain", {kGpu0}, {kGpu0, kCtl}, {}, {"nvidiactl"}},
                      DriftCase{"InTheQuietWindow", {}, {kGpu0}, milliseconds(50), {}},
                      DriftCase{"QuietWindowOver", {}, {kGpu0}, -milliseconds(1), {"nvidia0"}}),
    [](const auto& info) { return std::string(info.param.name); });

// ---- observe mode --------------------------------------------------------------------

TEST(RepairPlanObserveMode, ReportsOnceGrantsNothingAndReportsAgainAfterRecovery) {
  RepairState state = fresh();
  RepairPlan first = plan_repair(state, {kGpu0}, kT0, settings(Mode::kObserve));
  EXPECT_TRUE(first.grant.empty());
  EXPECT_TRUE(first.report_observed);
  EXPECT_EQ(names(first.drifted), std::vector<std::string>{"nvidia0"}) << "drift is counted in observe mode too";
  RepairPlan again = plan_repair(state, {kGpu0}, kT0 + seconds(1), settings(Mode::kObserve));
  EXPECT_FALSE(again.report_observed) << "logged once while it lasts";
  EXPECT_TRUE(again.grant.empty());
  (void)plan_repair(state, {}, kT0 + seconds(2), settings(Mode::kObserve));  // granted by someone else
  EXPECT_TRUE(plan_repair(state, {kGpu0}, kT0 + seconds(3), settings(Mode::kObserve)).report_observed);
}

// ---- refused grants and their back-off -----------------------------------------------

TEST(RepairPlanRefusedGrants, WaitForTheBackoffAndAreReportedOnceUntilOneSucceeds) {
  RepairState state = fresh();
  const RepairSettings s = settings();
  RepairPlan plan = plan_repair(state, {kGpu0, kCtl}, kT0, s);
  ASSERT_EQ(names(plan.grant), (std::vector<std::string>{"nvidia0", "nvidiactl"}));
  SettledGrants settled = settle_grants(state, {{kGpu0, errno_error(EPERM, "refused by the kernel")}, {kCtl, Status()}}, kT0, s);
  EXPECT_EQ(names(settled.granted), std::vector<std::string>{"nvidiactl"});
  ASSERT_EQ(settled.report_refused.size(), 1u);
  EXPECT_EQ(settled.report_refused[0].first.name, "nvidia0");
  EXPECT_EQ(settled.report_refused[0].second.message, "refused by the kernel");
  ASSERT_TRUE(settled.retry_at);
  EXPECT_EQ(*settled.retry_at, kT0 + seconds(30));
  EXPECT_FALSE(settled.gone);

  // Within the back-off: not asked again, a retry at its end.
  RepairPlan waiting = plan_repair(state, {kGpu0}, kT0 + seconds(10), s);
  EXPECT_TRUE(waiting.grant.empty());
  ASSERT_TRUE(waiting.retry_at);
  EXPECT_EQ(*waiting.retry_at, kT0 + seconds(30));

  // After it: asked again; refused again, not reported again.
  RepairPlan retry = plan_repair(state, {kGpu0}, kT0 + seconds(30), s);
  EXPECT_EQ(names(retry.grant), std::vector<std::string>{"nvidia0"});
  settled = settle_grants(state, {{kGpu0, errno_error(EPERM, "refused")}}, kT0 + seconds(30), s);
  EXPECT_TRUE(settled.report_refused.empty()) << "logged once until a grant succeeds";

  // It succeeds: the back-off is forgotten, and a later refusal is reported again.
  settled = settle_grants(state, {{kGpu0, Status()}}, kT0 + seconds(61), s);
  EXPECT_EQ(names(settled.granted), std::vector<std::string>{"nvidia0"});
  EXPECT_TRUE(state.refused_until.empty());
  EXPECT_TRUE(state.missing.empty());
  settled = settle_grants(state, {{kGpu0, errno_error(EPERM, "refused")}}, kT0 + seconds(62), s);
  EXPECT_EQ(settled.report_refused.size(), 1u);
}

TEST(RepairPlanRefusedGrants, ACgroupGoneMidRepairIsNotARefusal) {
  RepairState state = fresh();
  SettledGrants settled =
      settle_grants(state, {{kGpu0, errno_error(ENOENT, "cgroup removed")}}, kT0, settings());
  EXPECT_TRUE(settled.gone);
  EXPECT_TRUE(settled.report_refused.empty());
  EXPECT_TRUE(state.refused_until.empty());
  EXPECT_TRUE(is_cgroup_gone(errno_error(ENODEV, "")));
  EXPECT_FALSE(is_cgroup_gone(errno_error(EPERM, "")));
}

// ---- the fight-loop guard (token bucket) ---------------------------------------------

TEST(RepairPlanBudget, AnEmptyBucketHoldsRepairsBackAndReportsOnce) {
  RepairState state = fresh(/*burst=*/2, /*per_minute=*/60);  // a token a second after the burst
  const RepairSettings s = settings();
  for (int i = 0; i < 2; ++i) {
    RepairPlan plan = plan_repair(state, {kGpu0}, kT0, s);
    EXPECT_EQ(names(plan.grant), std::vector<std::string>{"nvidia0"}) << "the burst is repaired at once";
    (void)settle_grants(state, {{kGpu0, Status()}}, kT0, s);
  }
  RepairPlan held = plan_repair(state, {kGpu0}, kT0, s);
  EXPECT_TRUE(held.grant.empty());
  EXPECT_TRUE(held.throttled);
  EXPECT_TRUE(held.report_throttled);
  EXPECT_EQ(names(held.held), std::vector<std::string>{"nvidia0"});
  ASSERT_TRUE(held.retry_at);
  EXPECT_EQ(*held.retry_at, state.budget.next_token_at(kT0)) << "the deferred repair comes with the next token";
  EXPECT_TRUE(held_back(state, held.retry_at, kT0)) << "re-reading before that only burns CPU";
  EXPECT_FALSE(held_back(state, std::nullopt, kT0)) << "no retry armed: check";

  RepairPlan still = plan_repair(state, {kGpu0}, kT0 + milliseconds(10), s);
  EXPECT_TRUE(still.throttled);
  EXPECT_FALSE(still.report_throttled) << "reported once while it lasts";

  RepairPlan next = plan_repair(state, {kGpu0}, kT0 + seconds(1), s);
  EXPECT_EQ(names(next.grant), std::vector<std::string>{"nvidia0"}) << "a token came";
  (void)settle_grants(state, {{kGpu0, Status()}}, kT0 + seconds(1), s);
  RepairPlan calm = plan_repair(state, {}, kT0 + seconds(60), s);
  EXPECT_TRUE(calm.report_unthrottled);
  EXPECT_FALSE(state.throttled);
}

// ---- systemd persistence -------------------------------------------------------------

TEST(RepairPlanSystemd, WhatTheUnitFilesLackIsPersistedBeforeAnyHarmOneCallAtATime) {
  RepairState state = fresh();
  const RepairSettings s = settings();
  const std::vector<WantedDevice> lacking = {kGpu0, kCtl};
  PersistencePlan plan = plan_persistence(state, lacking, /*granted=*/{}, kT0, s);
  EXPECT_EQ(names(plan.devices), (std::vector<std::string>{"nvidia0", "nvidiactl"})) << "nothing granted yet: prevention";
  persist_started(state, kT0, s);
  EXPECT_EQ(state.quiet_until, kT0 + seconds(5) + milliseconds(100))
      << "systemd's own re-apply is not drift while the call may run";
  EXPECT_TRUE(plan_persistence(state, lacking, {}, kT0 + milliseconds(1), s).devices.empty()) << "one call at a time";

  persist_answered(state, lacking, /*ok=*/true, kT0 + milliseconds(3), s);
  EXPECT_FALSE(state.persist_in_flight);
  EXPECT_EQ(state.quiet_until, kT0 + milliseconds(103));
  EXPECT_TRUE(plan_persistence(state, std::vector<WantedDevice>{}, {kGpu0}, kT0 + seconds(1), s).devices.empty())
      << "the unit files hold them: nothing to add";

  RepairState failed = fresh();
  persist_started(failed, kT0, s);
  persist_answered(failed, lacking, /*ok=*/false, kT0 + milliseconds(3), s);
  EXPECT_FALSE(failed.persist_in_flight);
  EXPECT_EQ(names(plan_persistence(failed, lacking, {}, kT0 + milliseconds(4), s).devices),
            (std::vector<std::string>{"nvidia0", "nvidiactl"}))
      << "refused by systemd: asked again";
}

TEST(RepairPlanSystemd, AfterAReapplyResetDeviceAllowTheDevicesArePersistedAgain) {
  // `runc update` with the systemd driver sets DeviceAllow= to the spec: the unit files lack
  // the GPU again, however long ago systemd took it.
  RepairState state = fresh();
  const RepairSettings s = settings();
  persist_started(state, kT0, s);
  persist_answered(state, {kGpu0}, true, kT0 + milliseconds(3), s);
  PersistencePlan again = plan_persistence(state, std::vector<WantedDevice>{kGpu0}, {kGpu0}, kT0 + seconds(5), s);
  EXPECT_EQ(names(again.devices), std::vector<std::string>{"nvidia0"});

  // Within persist_repeat of systemd taking them, the same devices wait (a scope whose unit
  // files systemd.unit_dirs does not show would be asked at every look), with a retry.
  PersistencePlan soon = plan_persistence(state, std::vector<WantedDevice>{kGpu0}, {}, kT0 + milliseconds(500), s);
  EXPECT_TRUE(soon.devices.empty());
  ASSERT_TRUE(soon.retry_at);
  EXPECT_EQ(*soon.retry_at, kT0 + milliseconds(3) + s.persist_repeat);
}

TEST(RepairPlanSystemd, WithUnreadableUnitFilesWhatWasGrantedIsPersisted) {
  RepairState state = fresh();
  const RepairSettings s = settings();
  EXPECT_TRUE(plan_persistence(state, std::nullopt, {}, kT0, s).devices.empty()) << "nothing known, nothing granted";
  EXPECT_EQ(names(plan_persistence(state, std::nullopt, {kGpu0}, kT0, s).devices), std::vector<std::string>{"nvidia0"});
}

TEST(RepairPlanRaces, AGrantLostToAConcurrentAttachIsRetriedSoonNotBackedOff) {
  RepairState state = fresh();
  const RepairSettings s = settings();
  (void)plan_repair(state, {kGpu0}, kT0, s);
  SettledGrants settled = settle_grants(state, {{kGpu0, errno_error(EAGAIN, "denied again")}}, kT0, s);
  EXPECT_TRUE(settled.report_refused.empty()) << "not a refusal";
  EXPECT_TRUE(state.refused_until.empty());
  ASSERT_TRUE(settled.retry_at);
  EXPECT_EQ(*settled.retry_at, kT0 + s.raced_retry);
  EXPECT_EQ(names(plan_repair(state, {kGpu0}, kT0 + s.raced_retry, s).grant), std::vector<std::string>{"nvidia0"})
      << "asked again at once";
}

// ---- attribution ---------------------------------------------------------------------

struct WindowCase {
  const char* name;
  Clock::duration revoked_before_trigger;
  bool explains;
};

class AttributionWindow : public ::testing::TestWithParam<WindowCase> {};

TEST_P(AttributionWindow, ARevocationExplainsARepairTriggeredSoonAfter) {
  const WindowCase& c = GetParam();
  EXPECT_EQ(explains(kT0 - c.revoked_before_trigger, kT0), c.explains);
  Revocation r;
  r.at = kT0 - c.revoked_before_trigger;
  EXPECT_EQ(names_repair(r, kT0), c.explains);
  r.cause_of = kT0;
  EXPECT_TRUE(names_repair(r, kT0)) << "handed to the repair as its cause";
  EXPECT_EQ(names_repair(r, kT0 + seconds(5)), explains(r.at, kT0 + seconds(5))) << "another repair";
}

INSTANTIATE_TEST_SUITE_P(, AttributionWindow,
                         ::testing::Values(WindowCase{"Same", {}, true}, WindowCase{"Microseconds", milliseconds(0) + std::chrono::microseconds(30), true},
                                           WindowCase{"AtTheLimit", seconds(1), true},
                                           WindowCase{"TooOld", seconds(1) + milliseconds(1), false},
                                           WindowCase{"AfterTheTrigger", -milliseconds(1), false}),
                         [](const auto& info) { return std::string(info.param.name); });

Revocation deny_write(const std::string& writer, Clock::time_point at, DeviceRule rule, pid_t tid = 1) {
  Revocation r;
  r.writer = writer;
  r.at = at;
  r.rule = rule;
  r.tid = tid;
  r.ktime_ns = static_cast<std::uint64_t>(at.time_since_epoch().count());
  return r;
}

TEST(RuleRevokes, OnlyRulesTakingAccessAWantedDeviceNeeds) {
  EXPECT_TRUE(rule_revokes(DeviceRule{DeviceType::kAll, kAnyNumber, kAnyNumber, kAccessAll}, {kGpu0}));
  EXPECT_TRUE(rule_revokes(DeviceRule{DeviceType::kChar, 195, 0, kAccessRead}, {kGpu0}));
  EXPECT_TRUE(rule_revokes(DeviceRule{DeviceType::kChar, 195, kAnyNumber, kAccessWrite}, {kGpu0}));
  EXPECT_FALSE(rule_revokes(DeviceRule{DeviceType::kChar, 195, 1, kAccessAll}, {kGpu0}));
  EXPECT_FALSE(rule_revokes(DeviceRule{DeviceType::kChar, 195, 0, kAccessMknod}, {kGpu0})) << "rw is what it needs";
  EXPECT_FALSE(rule_revokes(DeviceRule{DeviceType::kBlock, 195, 0, kAccessAll}, {kGpu0}));
}

TEST(PendingRevocations, TheNewestWriteExplainingWhatIsMissingIsAdoptedOnce) {
  PendingRevocations pending;
  pending.add(deny_write("runc", kT0, DeviceRule{DeviceType::kAll, kAnyNumber, kAnyNumber, kAccessAll}), kT0);
  pending.add(deny_write("other", kT0 + milliseconds(1), DeviceRule{DeviceType::kChar, 1, 3, kAccessAll}),
              kT0 + milliseconds(1));
  auto r = pending.take_explaining({kGpu0}, kT0 + seconds(2));
  ASSERT_TRUE(r);
  EXPECT_EQ(r->writer, "runc") << "the newer write denies /dev/null: it explains nothing missing";
  EXPECT_TRUE(pending.empty()) << "taken once";
  EXPECT_FALSE(pending.take_explaining({kGpu0}, kT0 + seconds(2)));
}

TEST(PendingRevocations, AreBoundedInNumberAndAgeAndWithdrawnWhenTheWriteFailed) {
  PendingRevocations pending;
  const DeviceRule all{DeviceType::kAll, kAnyNumber, kAnyNumber, kAccessAll};
  for (int i = 0; i < 10; ++i) pending.add(deny_write("w" + std::to_string(i), kT0, all, i), kT0);
  EXPECT_EQ(pending.size(), PendingRevocations::kMaxKept);
  auto newest = pending.take_explaining({kGpu0}, kT0);
  ASSERT_TRUE(newest);
  EXPECT_EQ(newest->writer, "w9");

  pending.add(deny_write("old", kT0, all), kT0);
  EXPECT_FALSE(pending.take_explaining({kGpu0}, kT0 + PendingRevocations::kMaxAge + seconds(1))) << "too old";

  pending.add(deny_write("failed", kT0, all, 42), kT0);
  pending.withdraw(42, static_cast<std::uint64_t>(kT0.time_since_epoch().count()));
  EXPECT_TRUE(pending.empty());
}

// ---- one pass of the repair loop on an in-memory device policy -----------------------

using test::FakeDeviceAccess;

DesiredDevices desired(std::vector<WantedDevice> wanted) {
  DesiredDevices d;
  d.wanted = std::move(wanted);
  return d;
}

TEST(RepairStep, DefersAGrantWhileProbeRecordsWaitUnreadAndOnlyThen) {
  // The probe's records stand in as a pipe: readable while something waits in it.
  int records[2];
  ASSERT_EQ(::pipe(records), 0);
  FakeDeviceAccess access;
  access.allowed["/c"] = {kCtl.dev};
  RepairState state = fresh();
  // Nothing waits: the look's missing device is granted.
  RepairStep step = repair_once(access, state, "/c", desired({kGpu0, kCtl}), kT0, settings(), false, nullptr,
                                records[0]);
  EXPECT_FALSE(step.deferred);
  EXPECT_EQ(access.grants, 1);
  // A record waits (a runtime's attach the look may have seen): nothing planned or granted.
  access.allowed["/c"] = {kCtl.dev};
  ASSERT_EQ(::write(records[1], "r", 1), 1);
  step = repair_once(access, state, "/c", desired({kGpu0, kCtl}), kT0 + seconds(1), settings(), false, nullptr,
                     records[0]);
  EXPECT_TRUE(step.deferred);
  EXPECT_FALSE(step.applied);
  EXPECT_TRUE(step.plan.drifted.empty()) << "not planned, so not reported as drift yet";
  EXPECT_EQ(access.grants, 1);
  // Nothing missing: records waiting change nothing.
  access.allowed["/c"] = {kCtl.dev, kGpu0.dev};
  EXPECT_FALSE(repair_once(access, state, "/c", desired({kGpu0, kCtl}), kT0 + seconds(2), settings(), false, nullptr,
                           records[0])
                   .deferred);
  ::close(records[0]);
  ::close(records[1]);
}

TEST(RepairStep, ObservesPlansAndGrantsOnlyWhatIsMissing) {
  FakeDeviceAccess access;
  access.allowed["/c"] = {kCtl.dev};
  RepairState state = fresh();
  RepairStep step = repair_once(access, state, "/c", desired({kGpu0, kCtl}), kT0, settings());
  ASSERT_TRUE(step.observed);
  EXPECT_EQ(names(step.plan.drifted), std::vector<std::string>{"nvidia0"});
  ASSERT_TRUE(step.applied);
  EXPECT_EQ(names(step.settled.granted), std::vector<std::string>{"nvidia0"});
  EXPECT_EQ(access.allowed["/c"].size(), 2u);
  RepairStep healthy = repair_once(access, state, "/c", desired({kGpu0, kCtl}), kT0 + seconds(1), settings());
  EXPECT_FALSE(healthy.applied) << "nothing missing: nothing touched";
  EXPECT_EQ(access.grants, 1);
}

TEST(RepairStep, ObserveModeAndRefusalsAndGoneCgroups) {
  FakeDeviceAccess access;
  access.allowed["/c"] = {};
  RepairState observed = fresh();
  RepairStep step = repair_once(access, observed, "/c", desired({kGpu0}), kT0, settings(Mode::kObserve));
  EXPECT_TRUE(step.plan.report_observed);
  EXPECT_EQ(access.grants, 0);

  access.refused = {kGpu0.dev};
  RepairState refused = fresh();
  step = repair_once(access, refused, "/c", desired({kGpu0}), kT0, settings());
  EXPECT_EQ(step.settled.report_refused.size(), 1u);
  EXPECT_TRUE(step.settled.granted.empty());
  step = repair_once(access, refused, "/c", desired({kGpu0}), kT0 + seconds(1), settings());
  EXPECT_EQ(access.grants, 1) << "the back-off holds the refused grant";

  RepairState gone = fresh();
  step = repair_once(access, gone, "/gone", desired({kGpu0}), kT0, settings());
  EXPECT_TRUE(step.gone);
  EXPECT_FALSE(step.report_read_error);

  access.unreadable = {"/c"};
  RepairState unreadable = fresh();
  EXPECT_TRUE(repair_once(access, unreadable, "/c", desired({kGpu0}), kT0, settings()).report_read_error);
  EXPECT_FALSE(repair_once(access, unreadable, "/c", desired({kGpu0}), kT0, settings()).report_read_error)
      << "logged once while it lasts";
}

}  // namespace
}  // namespace gdw

namespace gdw {
namespace {

TEST(PlanPersistence, ObserveModeAsksSystemdForNothing) {
  RepairSettings observe;
  observe.mode = Mode::kObserve;
  RepairState state{RepairBudget(10, 600)};
  const std::vector<WantedDevice> lacking{
      WantedDevice{DeviceNumber{DeviceType::kChar, 195, 0}, kAccessReadWrite, "nvidia0", "test"}};
  EXPECT_TRUE(plan_persistence(state, lacking, {}, Clock::now(), observe).devices.empty())
      << "observe mode writes no DeviceAllow=";
  EXPECT_TRUE(plan_persistence(state, std::nullopt, lacking, Clock::now(), observe).devices.empty());
  RepairSettings enforce;
  EXPECT_EQ(plan_persistence(state, lacking, {}, Clock::now(), enforce).devices.size(), 1u);
}

}  // namespace
}  // namespace gdw
