#include "kube/backoff.h"

#include <algorithm>

namespace gdw::kube {

std::optional<std::chrono::seconds> parse_retry_after(std::string_view value, std::chrono::seconds cap) {
  while (!value.empty() && (value.front() == ' ' || value.front() == '\t')) value.remove_prefix(1);
  while (!value.empty() && (value.back() == ' ' || value.back() == '\t' || value.back() == '\r' || value.back() == '\n'))
    value.remove_suffix(1);
  if (value.empty() || value.size() > 9) return std::nullopt;
  long n = 0;
  for (char c : value) {
    if (c < '0' || c > '9') return std::nullopt;
    n = n * 10 + (c - '0');
  }
  return std::min(std::chrono::seconds(n), cap);
}

Backoff::duration Backoff::after(int failures, std::optional<duration> retry_after) {
  duration d = first_;
  for (int i = 1; i < failures && d < max_; ++i) d *= 2;
  d = std::min(d, max_);
  if (jitter_ > 0) {
    std::uniform_real_distribution<double> draw(1.0 - jitter_ / 2, 1.0 + jitter_ / 2);
    d = std::chrono::duration_cast<duration>(std::chrono::duration<double, duration::period>(d.count() * draw(rng_)));
  }
  if (retry_after) d = std::max(d, *retry_after);
  return d;
}

Backoff::duration Backoff::next(std::optional<duration> retry_after) { return after(++failures_, retry_after); }

std::uint64_t random_seed() {
  std::random_device rd;
  return (std::uint64_t(rd()) << 32) ^ rd();
}

}  // namespace gdw::kube
