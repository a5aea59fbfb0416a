#include "core/revocation.h"

#include <algorithm>

namespace gdw {

std::string describe(const Revocation& r) {
  std::string s = r.writer + " (pid " + std::to_string(r.pid) + ", comm " + r.comm;
  if (!r.exe.empty()) s += ", " + r.exe;
  s += ", parent " + r.parent_comm + ") ";
  s += r.action.empty() ? "writing '" + r.rule_text + "' to devices.deny" : r.action;
  return s;
}

bool explains(Clock::time_point at, Clock::time_point trigger) {
  return at <= trigger && trigger - at <= kAttributionWindow;
}

bool names_repair(const Revocation& r, Clock::time_point trigger) {
  return (r.cause_of && *r.cause_of == trigger) || explains(r.at, trigger);
}

bool rule_revokes(const DeviceRule& deny, const std::vector<WantedDevice>& wanted) {
  return std::any_of(wanted.begin(), wanted.end(), [&](const WantedDevice& d) {
    if (deny.type == DeviceType::kAll) return true;
    const DeviceRule numbers{deny.type, deny.major, deny.minor, kAccessAll};
    return rule_covers(numbers, d.dev, kAccessAll) && (deny.access & d.access) != 0;
  });
}

void PendingRevocations::expire(Clock::time_point now) {
  while (!kept_.empty() && now - kept_.front().at > kMaxAge) kept_.pop_front();
}

void PendingRevocations::add(Revocation r, Clock::time_point now) {
  kept_.push_back(std::move(r));
  while (kept_.size() > kMaxKept) kept_.pop_front();
  expire(now);
}

void PendingRevocations::withdraw(pid_t tid, std::uint64_t ktime_ns) {
  std::erase_if(kept_, [&](const Revocation& r) { return r.tid == tid && r.ktime_ns == ktime_ns; });
}

std::optional<Revocation> PendingRevocations::take_explaining(const std::vector<WantedDevice>& missing,
                                                              Clock::time_point now) {
  expire(now);
  std::optional<Revocation> found;
  for (auto it = kept_.rbegin(); it != kept_.rend() && !found; ++it)
    if (it->rule && rule_revokes(*it->rule, missing)) found = *it;
  kept_.clear();
  return found;
}

}  // namespace gdw
