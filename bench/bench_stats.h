// The statistics the benches print: percentiles of samples, means, and time differences.
#pragma once

#include <algorithm>
#include <chrono>
#include <cstddef>
#include <vector>

namespace gdw::bench {

// The q-quantile of `v` (q in [0, 1]; 1 is the maximum): the sample at index q * n, so a
// p99 of 300 samples is the 298th smallest. -1 when there are no samples.
inline double pct(std::vector<double> v, double q) {
  if (v.empty()) return -1;
  std::sort(v.begin(), v.end());
  return v[std::min(v.size() - 1, static_cast<std::size_t>(q * static_cast<double>(v.size())))];
}

inline double mean(const std::vector<double>& v) {
  double s = 0;
  for (double x : v) s += x;
  return v.empty() ? -1 : s / static_cast<double>(v.size());
}

// A steady-clock time as nanoseconds, to pass between processes (pipes, shared memory).
inline long long steady_ns(std::chrono::steady_clock::time_point t = std::chrono::steady_clock::now()) {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(t.time_since_epoch()).count();
}

template <class TimePoint>
double us_between(TimePoint a, TimePoint b) {
  return std::chrono::duration<double, std::micro>(b - a).count();
}

}  // namespace gdw::bench
