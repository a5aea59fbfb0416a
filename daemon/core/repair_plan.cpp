#include "core/repair_plan.h"

#include <algorithm>
#include <cerrno>

namespace gdw {
namespace {

void earliest(std::optional<Clock::time_point>& at, Clock::time_point t) {
  if (!at || t < *at) at = t;
}

}  // namespace

RepairSettings RepairSettings::from(const Config& config) {
  RepairSettings s;
  s.mode = config.mode;
  s.rejected_backoff = config.repair.rejected_backoff;
  s.systemd_timeout = config.systemd.timeout;
  return s;
}

bool held_back(const RepairState& state, std::optional<Clock::time_point> retry_at, Clock::time_point now) {
  return state.throttled && retry_at && *retry_at <= state.budget.next_token_at(now) + std::chrono::milliseconds(1);
}

RepairPlan plan_repair(RepairState& state, const std::vector<WantedDevice>& missing, Clock::time_point now,
                       const RepairSettings& settings) {
  RepairPlan plan;
  // Drift is a transition: counted when a device that was there goes missing.
  plan.drifted.reserve(missing.size());
  for (const auto& m : missing)
    if (!state.missing.count(m.dev) && now >= state.quiet_until) plan.drifted.push_back(m);
  state.missing.clear();
  for (const auto& m : missing) state.missing.insert(m.dev);
  if (missing.empty()) {
    state.observe_reported.reset();
    if (state.throttled && !state.budget.exhausted(now)) {
      state.throttled = false;
      plan.report_unthrottled = true;
    }
    return plan;
  }
  if (settings.mode == Mode::kObserve) {
    plan.report_observed = state.observe_reported.first();
    return plan;
  }
  // Devices the kernel refused recently wait for their back-off; the others go now.
  std::vector<WantedDevice> grantable;
  grantable.reserve(missing.size());
  for (const auto& m : missing) {
    auto r = state.refused_until.find(m.dev);
    if (r != state.refused_until.end() && now < r->second) {
      earliest(plan.retry_at, r->second);
    } else {
      grantable.push_back(m);
    }
  }
  if (grantable.empty()) return plan;
  if (auto wait = state.budget.acquire(now); wait > Clock::duration::zero()) {
    plan.throttled = true;
    plan.held = std::move(grantable);
    plan.report_throttled = !state.throttled;
    state.throttled = true;
    earliest(plan.retry_at, now + wait);
    return plan;
  }
  plan.grant = std::move(grantable);
  return plan;
}

SettledGrants settle_grants(RepairState& state, const std::vector<DeviceOutcome>& outcomes, Clock::time_point now,
                            const RepairSettings& settings) {
  SettledGrants s;
  s.granted.reserve(outcomes.size());
  for (const auto& o : outcomes) {
    if (o.outcome) {
      s.granted.push_back(o.device);
      state.missing.erase(o.device.dev);
      state.refused_until.erase(o.device.dev);
      state.refused_reported.reset(o.device.dev);
      continue;
    }
    if (is_cgroup_gone(o.outcome.error())) {
      s.gone = true;
      return s;
    }
    if (o.outcome.error().code == EAGAIN) {
      earliest(s.retry_at, now + settings.raced_retry);
      continue;
    }
    state.refused_until[o.device.dev] = now + settings.rejected_backoff;
    earliest(s.retry_at, now + settings.rejected_backoff);
    if (state.refused_reported.first(o.device.dev)) s.report_refused.emplace_back(o.device, o.outcome.error());
  }
  return s;
}

PersistencePlan plan_persistence(const RepairState& state, const std::optional<std::vector<WantedDevice>>& lacking,
                                 const std::vector<WantedDevice>& granted, Clock::time_point now,
                                 const RepairSettings& settings) {
  PersistencePlan plan;
  // Observe mode writes nothing: no unit property either.
  if (settings.mode != Mode::kEnforce) return plan;
  const std::vector<WantedDevice>& devices = lacking ? *lacking : granted;
  if (devices.empty() || state.persist_in_flight) return plan;
  const bool all_taken_lately =
      now < state.persisted_at + settings.persist_repeat &&
      std::all_of(devices.begin(), devices.end(), [&](const WantedDevice& d) { return state.persisted_last.count(d.dev); });
  if (all_taken_lately) {
    plan.retry_at = state.persisted_at + settings.persist_repeat;
    return plan;
  }
  plan.devices = devices;
  return plan;
}

void persist_started(RepairState& state, Clock::time_point now, const RepairSettings& settings) {
  state.persist_in_flight = true;
  state.quiet_until = now + settings.systemd_timeout + settings.systemd_settle;
}

void persist_answered(RepairState& state, const std::vector<WantedDevice>& devices, bool ok, Clock::time_point now,
                      const RepairSettings& settings) {
  state.persist_in_flight = false;
  if (!ok) return;
  state.persisted_last.clear();
  for (const auto& d : devices) state.persisted_last.insert(d.dev);
  state.persisted_at = now;
  state.quiet_until = now + settings.systemd_settle;
}

bool is_cgroup_gone(const Error& e) { return e.code == ENOENT || e.code == ENODEV; }

std::string device_names(const std::vector<WantedDevice>& devices) {
  std::string s;
  for (const auto& d : devices) s += (s.empty() ? "" : ",") + d.name;
  return s;
}

std::string grant_rules_text(const std::vector<WantedDevice>& devices) {
  std::string s;
  for (const auto& r : grant_rules(devices)) s += (s.empty() ? "" : "; ") + format_device_rule(r);
  return s;
}

}  // namespace gdw
