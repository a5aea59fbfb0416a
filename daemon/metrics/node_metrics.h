// The node's and its containers' gauges: GPU containers watched, missing, unidentified,
// held back; identity problems; CDI; device programs; the checkpoint's state and age;
// exposure. And forgetting every series of a container that is gone.
// A view on the one Metrics registry (metrics.h): cheap to copy, valid while it lives.
#pragma once

#include <cstddef>
#include <optional>
#include <string>

#include "metrics/container_labels.h"

namespace gdw {

class Metrics;

class NodeMetrics {
 public:
  explicit NodeMetrics(Metrics& metrics) : m_(&metrics) {}

  void set_containers_watched(std::size_t n);
  void set_containers_missing_devices(std::size_t n);
  void set_containers_unidentified(std::size_t n);
  void set_containers_throttled(std::size_t n);
  void set_ambiguous_pod_identities(std::size_t n);
  void set_identity_conflicts(std::size_t n);
  // CDI: spec files in cdi.spec_dirs that do not parse (left out), and CDI device names
  // allocated to running GPU containers (AllocResp, DRA claims) that no spec defines.
  void set_cdi_spec_errors(std::size_t n);
  void set_cdi_unresolved_devices(std::size_t n);
  // cgroup v2: device programs attached to watched containers, by owner (ours | systemd | runtime).
  void set_device_programs(const std::string& owner, std::size_t n);
  void set_checkpoint_checksum_valid(bool valid);
  void set_checkpoint_loaded(bool ok);
  void set_checkpoint_last_write(double unix_seconds);
  void set_newest_container_start(double unix_seconds);
  // A GPU container's wanted devices that the next re-apply would revoke (node/exposure.h),
  // by re-applier: the runtime applying its OCI spec again, systemd applying the scope's
  // DeviceAllow= again (daemon-reload). A device both lack counts in both.
  struct ExposedDevices {
    std::size_t runtime = 0;
    std::size_t systemd = 0;
  };
  // Set when a container is (re)resolved: `exposed` (nullopt: not a GPU container, no
  // series); `env_visible`: it reaches GPUs through NVIDIA_VISIBLE_DEVICES without an
  // allocation. The node totals follow.
  void set_container_exposure(const ContainerLabels& c, std::optional<ExposedDevices> exposed, bool env_visible);
  // Forgets every series of a container that is gone.
  void forget(const ContainerLabels& c);

 private:
  Metrics* m_;
};

}  // namespace gdw
