// When a stale checkpoint may be remediated: only against a fresh inventory, only when the
// staleness persists past the confirmation window, never while running containers hold
// devices it names.
#include "node/stale_remediation.h"

#include <gtest/gtest.h>

namespace gdw {
namespace {

using namespace std::chrono_literals;
using TimePoint = RemediationInputs::TimePoint;
using Action = RemediationAction;
using Hold = RemediationHold;

const TimePoint kT0 = TimePoint(1000h);
constexpr Duration kWindow = 5min;

struct Case {
  const char* name;
  bool stale = true;
  bool enabled = true;
  bool fresh = true;
  bool refresh_failed = false;
  std::optional<Duration> since_ago;       // stale_since = now - this
  std::optional<Duration> next_check_in;   // next_check = now + this (negative: passed)
  Hold pending_hold = Hold::kNone;
  std::vector<std::string> holders;
  // expected
  Action action;
  Hold hold;
  std::optional<Duration> recheck_in;  // recheck_at = now + this
  bool starts_window = false;
};

const Case kCases[] = {
    {.name = "not stale: nothing", .stale = false, .action = Action::kNone, .hold = Hold::kNone},
    {.name = "remediation off: nothing", .enabled = false, .since_ago = 10min, .action = Action::kNone,
     .hold = Hold::kNone},
    {.name = "cached inventory: ask again first", .fresh = false, .action = Action::kRefreshInventory,
     .hold = Hold::kInventoryUnconfirmed},
    {.name = "cached inventory, even long stale: ask again", .fresh = false, .since_ago = 1h,
     .action = Action::kRefreshInventory, .hold = Hold::kInventoryUnconfirmed},
    {.name = "failed refresh: held, tried again after the window", .fresh = false, .refresh_failed = true,
     .action = Action::kHold, .hold = Hold::kInventoryUnconfirmed, .recheck_in = kWindow},
    {.name = "failed refresh past the window: held", .fresh = false, .refresh_failed = true, .since_ago = 1h,
     .next_check_in = -1min, .action = Action::kHold, .hold = Hold::kInventoryUnconfirmed, .recheck_in = kWindow},
    {.name = "first fresh verdict: the window starts", .action = Action::kWait, .hold = Hold::kAwaitingConfirmation,
     .recheck_in = kWindow, .starts_window = true},
    {.name = "inside the window: wait, nothing asked", .fresh = false, .since_ago = 1min, .next_check_in = 4min,
     .pending_hold = Hold::kAwaitingConfirmation, .action = Action::kWait, .hold = Hold::kAwaitingConfirmation,
     .recheck_in = 4min},
    {.name = "fresh again but too early: wait", .since_ago = 4min, .action = Action::kWait,
     .hold = Hold::kAwaitingConfirmation, .recheck_in = 1min},
    {.name = "window over, not yet asked again: ask", .fresh = false, .since_ago = 5min, .next_check_in = 0min,
     .pending_hold = Hold::kAwaitingConfirmation, .action = Action::kRefreshInventory,
     .hold = Hold::kInventoryUnconfirmed},
    {.name = "confirmed, nothing running holds its devices: remediate", .since_ago = 5min, .next_check_in = 0min,
     .action = Action::kRemediate, .hold = Hold::kNone},
    {.name = "confirmed long ago: remediate", .since_ago = 3h, .action = Action::kRemediate, .hold = Hold::kNone},
    {.name = "confirmed, a running container holds a named device: held", .since_ago = 6min,
     .holders = {"uid-1/worker"}, .action = Action::kHold, .hold = Hold::kDevicesInUse, .recheck_in = kWindow},
    {.name = "back-off after devices-in-use: wait, same reason", .fresh = false, .since_ago = 8min,
     .next_check_in = 2min, .pending_hold = Hold::kDevicesInUse, .holders = {"uid-1/worker"}, .action = Action::kWait,
     .hold = Hold::kDevicesInUse, .recheck_in = 2min},
    {.name = "back-off after a failed refresh: wait, same reason", .fresh = false, .next_check_in = 3min,
     .pending_hold = Hold::kInventoryUnconfirmed, .action = Action::kWait, .hold = Hold::kInventoryUnconfirmed,
     .recheck_in = 3min},
};

TEST(DecideRemediation, Table) {
  for (const Case& c : kCases) {
    SCOPED_TRACE(c.name);
    RemediationInputs in;
    in.stale = c.stale;
    in.enabled = c.enabled;
    in.inventory_fresh = c.fresh;
    in.refresh_failed = c.refresh_failed;
    in.now = kT0;
    in.confirm_after = kWindow;
    if (c.since_ago) in.stale_since = kT0 - *c.since_ago;
    if (c.next_check_in) in.next_check = kT0 + *c.next_check_in;
    in.pending_hold = c.pending_hold;
    in.holders = c.holders;

    const RemediationDecision d = decide_remediation(in);

    EXPECT_EQ(d.action, c.action);
    EXPECT_EQ(to_string(d.hold), to_string(c.hold));
    EXPECT_EQ(d.starts_window, c.starts_window);
    if (c.recheck_in) {
      ASSERT_TRUE(d.recheck_at.has_value());
      EXPECT_EQ(*d.recheck_at - kT0, *c.recheck_in);
    } else {
      EXPECT_FALSE(d.recheck_at.has_value());
    }
  }
}

// The whole sequence a daemon goes through, each step fed the state the previous set.
TEST(DecideRemediation, NeverRemediatesOnOneVerdictOrACachedInventory) {
  RemediationInputs in;
  in.stale = true;
  in.enabled = true;
  in.confirm_after = kWindow;
  for (Duration elapsed = 0min; elapsed <= 2h; elapsed += 1min) {
    in.now = kT0 + elapsed;
    in.stale_since = kT0;
    in.inventory_fresh = false;  // every check against the cache
    EXPECT_NE(decide_remediation(in).action, Action::kRemediate) << elapsed.count();
  }
  in.stale_since.reset();
  in.inventory_fresh = true;  // fresh, but the first verdict
  in.now = kT0 + 2h;
  EXPECT_NE(decide_remediation(in).action, Action::kRemediate);
}

TEST(CheckpointDeviceHolders, RunningContainersWithNamedDevices) {
  auto entry = [](std::string uid, std::string container, std::string resource, std::vector<std::string> ids) {
    AllocationEntry e;
    e.pod_uid = std::move(uid);
    e.container_name = std::move(container);
    e.resource = std::move(resource);
    e.device_ids = std::move(ids);
    return e;
  };
  Checkpoint cp;
  cp.entries.push_back(entry("uid-1", "worker", "nvidia.com/gpu", {"GPU-a"}));
  cp.entries.push_back(entry("uid-2", "trainer", "nvidia.com/mig-1g.10gb", {"MIG-b"}));
  cp.entries.push_back(entry("uid-3", "nic", "example.com/nic", {"x"}));
  cp.entries.push_back(entry("uid-4", "empty", "nvidia.com/gpu", {}));
  const std::vector<std::string> globs = {"nvidia.com/gpu", "nvidia.com/mig-*"};

  struct HolderCase {
    const char* name;
    std::vector<RunningContainer> running;
    std::vector<std::string> want;
  };
  const HolderCase cases[] = {
      {"nothing runs", {}, {}},
      {"the allocated container runs", {{"uid-1", "worker", true}}, {"uid-1/worker"}},
      {"its cgroup is empty", {{"uid-1", "worker", false}}, {}},
      {"a sidecar of the pod holds nothing", {{"uid-1", "sidecar", true}}, {}},
      {"an unnamed container of the pod: in doubt it holds", {{"uid-1", std::nullopt, true}}, {"uid-1/?"}},
      {"MIG resource", {{"uid-2", "trainer", true}}, {"uid-2/trainer"}},
      {"another resource is not ours", {{"uid-3", "nic", true}}, {}},
      {"an entry without devices", {{"uid-4", "empty", true}}, {}},
      {"another pod with the same container name", {{"uid-9", "worker", true}}, {}},
      {"several, sorted and unique",
       {{"uid-2", "trainer", true}, {"uid-1", "worker", true}, {"uid-1", "worker", true}},
       {"uid-1/worker", "uid-2/trainer"}},
  };
  for (const auto& c : cases) {
    SCOPED_TRACE(c.name);
    EXPECT_EQ(checkpoint_device_holders(cp, globs, c.running), c.want);
  }
}

TEST(StaleEvidenceKey, SameStalenessSameKey) {
  StaleCheckpointReport a;
  a.stale = true;
  a.unknown_ids = {"MIG-a", "MIG-b"};
  StaleCheckpointReport b = a;
  EXPECT_EQ(stale_evidence_key(a), stale_evidence_key(b));
  b.unknown_ids = {"MIG-a"};
  EXPECT_NE(stale_evidence_key(a), stale_evidence_key(b));
  StaleCheckpointReport boot;
  boot.stale = true;
  boot.boot_id_mismatch = true;
  boot.checkpoint_boot_id = "old";
  EXPECT_NE(stale_evidence_key(boot), stale_evidence_key(a));
  EXPECT_EQ(stale_evidence_key(StaleCheckpointReport{}), "");
}

}  // namespace
}  // namespace gdw
