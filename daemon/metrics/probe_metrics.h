// The eBPF probe's metrics: whether it (and its syscall hook) is loaded, who revoked,
// denied opens, records lost.
// A view on the one Metrics registry (metrics.h): cheap to copy, valid while it lives.
#pragma once

#include <cstdint>
#include <string>

#include <optional>

#include "core/attach_hook_choice.h"
#include "metrics/container_labels.h"

namespace gdw {

class Metrics;

class ProbeMetrics {
 public:
  explicit ProbeMetrics(Metrics& metrics) : m_(&metrics) {}

  void set_probe_loaded(bool loaded);
  void set_syscall_hook_attached(bool attached);
  // The attach hook's kind attached (core/attach_hook_choice.h: lsm, fexit, kmalloc), or none.
  void set_attach_hook_attached(std::optional<AttachHookKind> kind);
  void set_capability_hook_attached(bool attached);
  void set_write_path_hook_attached(bool attached);
  void set_rule_writers_degraded(bool degraded);
  void revocation(const std::string& writer);
  void denied_open(const ContainerLabels& c, const std::string& device, std::uint64_t count = 1);
  // The probe's running count of lost records; the counter moves by what is new.
  void set_ring_buffer_drops(std::uint64_t total);
  // A record taken by the kernel `seconds` before the daemon read it.
  void record_delay(double seconds);

 private:
  Metrics* m_;
};

}  // namespace gdw
