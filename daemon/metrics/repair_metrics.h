// The repair loop's metrics: drift found, grants written, how long repairs took, the
// fight-loop guard, device programs replaced.
// A view on the one Metrics registry (metrics.h): cheap to copy, valid while it lives.
#pragma once

#include <cstddef>
#include <string>
#include <string_view>

#include "metrics/container_labels.h"

namespace gdw {

class Metrics;

enum class LookAhead { kLooked, kSameCpu, kInterval };

class RepairMetrics {
 public:
  explicit RepairMetrics(Metrics& metrics) : m_(&metrics) {}

  void drift(const ContainerLabels& c, const std::string& device);
  void regrant(bool success, const std::string& method, std::size_t count = 1);  // method: cgroupfs | bpf | systemd
  void repair_duration(double seconds);
  void throttled(const ContainerLabels& c);
  // cgroup v2: device programs our repairs replaced or detached.
  void programs_replaced(std::size_t n);
  // cgroup v2: wrappers loaded while a repair waited, or ahead of the next repairs.
  void programs_loaded(std::size_t n, bool ahead);
  // cgroup v2: a load inside a GPU container had it looked at ahead of the attach, or why not.
  void look_ahead(LookAhead outcome);
  // cgroup v2: swaps refused as stale (ESTALE) and looked at again.
  void stale_swaps(std::size_t n);
  // cgroup v2: whether swaps carry the revision of their query (Linux 6.17+).
  void set_swap_revisions(bool checked);
  // A check waited for a runtime's apply to end; `until`: what ended the wait
  // (core/apply_wait.h: writer_exit, create, quiet, limit).
  void apply_wait(std::string_view until);

 private:
  Metrics* m_;
};

}  // namespace gdw
