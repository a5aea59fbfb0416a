#include "core/repair_policy.h"

#include <algorithm>
#include <cmath>

namespace gdw {

RepairBudget::RepairBudget(std::uint32_t burst, std::uint32_t per_minute)
    : capacity_(std::max<std::uint32_t>(burst, 1)),
      tokens_(capacity_),
      tokens_per_ns_(static_cast<double>(std::max<std::uint32_t>(per_minute, 1)) / 60e9) {}

void RepairBudget::refill(Clock::time_point now) {
  if (last_ == Clock::time_point{}) last_ = now;
  if (now > last_) {
    double elapsed = static_cast<double>(std::chrono::duration_cast<std::chrono::nanoseconds>(now - last_).count());
    tokens_ = std::min(capacity_, tokens_ + elapsed * tokens_per_ns_);
    last_ = now;
  }
}

Clock::duration RepairBudget::acquire(Clock::time_point now) {
  refill(now);
  if (tokens_ >= 1.0) {
    tokens_ -= 1.0;
    return Clock::duration::zero();
  }
  auto wait_ns = static_cast<std::int64_t>(std::ceil((1.0 - tokens_) / tokens_per_ns_));
  return std::chrono::duration_cast<Clock::duration>(std::chrono::nanoseconds(std::max<std::int64_t>(wait_ns, 1)));
}

bool RepairBudget::exhausted(Clock::time_point now) const {
  RepairBudget copy = *this;
  copy.refill(now);
  return copy.tokens_ < 1.0;
}


Clock::time_point RepairBudget::next_token_at(Clock::time_point now) const {
  RepairBudget copy = *this;
  const auto wait = copy.acquire(now);
  return now + wait;
}

RepairLogLimit::RepairLogLimit(std::uint32_t burst, Clock::duration interval)
    : capacity_(std::max<std::uint32_t>(burst, 1)),
      lines_(capacity_),
      interval_(std::max(interval, Clock::duration(1))) {}

void RepairLogLimit::refill(Clock::time_point now) {
  // A full allowance credits nothing: the next line is earned an interval after one is spent.
  if (lines_ >= capacity_ || refilled_at_ == Clock::time_point{}) {
    refilled_at_ = now;
    return;
  }
  if (now <= refilled_at_) return;
  const auto earned = (now - refilled_at_) / interval_;
  if (earned <= 0) return;
  lines_ = static_cast<std::uint32_t>(std::min<std::int64_t>(capacity_, lines_ + earned));
  refilled_at_ = lines_ >= capacity_ ? now : refilled_at_ + earned * interval_;
}

Clock::time_point RepairLogLimit::next_line_at() const { return refilled_at_ + interval_; }

RepairLogLimit::Decision RepairLogLimit::on_repair(Clock::time_point now) {
  refill(now);
  Decision d;
  if (lines_ > 0) {
    --lines_;
    d.log = true;
    d.unlogged = unlogged_;
    if (unlogged_ > 0) d.since_last_line = now - last_line_at_;
    unlogged_ = 0;
    summary_owed_ = false;
    last_line_at_ = now;
    return d;
  }
  ++unlogged_;
  if (!summary_owed_) {
    summary_owed_ = true;
    d.summary_at = next_line_at();
  }
  return d;
}

std::optional<RepairLogLimit::Summary> RepairLogLimit::take_summary(Clock::time_point now) {
  refill(now);
  if (!summary_owed_ || unlogged_ == 0) return std::nullopt;
  if (lines_ > 0) --lines_;
  Summary s{unlogged_, now - last_line_at_};
  unlogged_ = 0;
  summary_owed_ = false;
  last_line_at_ = now;
  return s;
}

}  // namespace gdw
