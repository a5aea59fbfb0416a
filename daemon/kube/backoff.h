// How long a client of the API server waits before asking again: exponential back-off with
// jitter, so that nodes that failed together (an API server restart, an outage) do not all
// come back in the same instant, and the server's own Retry-After (429 Too Many Requests,
// 503 and other 5xx answers, API Priority and Fairness) as the least wait. Pure but for the
// random draws, whose seed is an argument.
#pragma once

#include <chrono>
#include <cstdint>
#include <optional>
#include <random>
#include <string_view>

namespace gdw::kube {

// A Retry-After header's value in delta-seconds ("1", "120"); nullopt for anything else
// (an HTTP-date is not used by the API server). Capped at `cap`.
std::optional<std::chrono::seconds> parse_retry_after(std::string_view value,
                                                      std::chrono::seconds cap = std::chrono::seconds(600));

class Backoff {
 public:
  using duration = std::chrono::steady_clock::duration;
  // Waits double from `first` up to `max`; each is drawn from [d·(1 − jitter/2), d·(1 + jitter/2)),
  // so the mean stays d. jitter 0: exactly d.
  Backoff(duration first, duration max, double jitter, std::uint64_t seed)
      : first_(first), max_(max), jitter_(jitter), rng_(seed) {}
  // The wait after one more failure: at least `retry_after` when the server named one.
  duration next(std::optional<duration> retry_after = std::nullopt);
  // The wait `failures` failures in (1: the first), jittered, at least `retry_after`.
  duration after(int failures, std::optional<duration> retry_after = std::nullopt);
  void reset() { failures_ = 0; }
  int failures() const { return failures_; }

 private:
  duration first_, max_;
  double jitter_;
  std::mt19937_64 rng_;
  int failures_ = 0;
};

// A seed for the back-off's draws that differs between processes and nodes.
std::uint64_t random_seed();

}  // namespace gdw::kube
