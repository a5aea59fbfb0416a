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

}  // namespace gdw
