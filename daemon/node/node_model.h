// The node as gpu-devwatch sees it: where the kubepods cgroups are, what kubelet allocated
// (checkpoint), what the host has (inventory), who each container is (OCI bundles).
// Reads the host; every decision is delegated to the pure functions it feeds.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "core/allocation_merge.h"
#include "core/config.h"
#include "core/desired_state.h"
#include "kubelet/checkpoint.h"
#include "node/container_target.h"
#include "node/stale_checkpoint.h"
#include "nvidia/inventory.h"
#include "nvidia/nvml.h"
#include "runtime/bundles.h"
#include "runtime/discovery.h"
#include "runtime/kubepods_scan.h"

namespace gdw {

struct CheckpointState {
  bool loaded = false;      // a checkpoint was read and parsed at least once
  std::string error;        // the last read/parse error ("" when the last load worked)
  bool used = false;        // its entries are used for allocations
  Checkpoint checkpoint;    // the last good parse
};

class NodeModel {
 public:
  explicit NodeModel(Config config);

  const Config& config() const { return config_; }
  DesiredPolicy policy() const {
    return DesiredPolicy{config_.devices.resources, config_.devices.control, config_.devices.env_visible,
                         config_.devices.dra_drivers};
  }

  // Finds the hierarchy that holds device policy (v1 devices or cgroup2) and the kubepods
  // parent in it.
  Status locate();
  const KubepodsLocation& kubepods() const { return kubepods_; }
  CgroupVersion version() const { return hierarchy_.version; }

  // Reads and parses kubelet.checkpoint. On error the previous good record stays in use.
  Status load_checkpoint();
  const CheckpointState& checkpoint() const { return checkpoint_; }
  const AllocationIndex& allocations() const { return allocations_; }

  // The last good PodResources answer (kubelet.source auto or pod-resources).
  void set_pod_resources(std::vector<PodResourcesContainer> containers);
  bool has_pod_resources() const { return pod_resources_.has_value(); }
  // Re-merges checkpoint and PodResources against the pods running now (names from their
  // bundles, UIDs from their cgroups; ambiguous names are reported in merged()).
  void rebuild_allocations();
  const MergedAllocations& merged() const { return merged_; }

  // Whether the checkpoint describes this host (boot id, device IDs present).
  StaleCheckpointReport stale_report() const;

  // Reads /proc and /dev; merges the last NVML answer and devices.mig_map.
  void load_inventory();
  const Inventory& inventory() const { return inventory_; }
  // True when an allocated MIG device is not mapped yet: only then is NVML worth asking.
  bool needs_nvml() const;
  void set_nvml_answer(NvmlAnswer answer);
  // The CDI spec files of cdi.spec_dirs as the last load_inventory() found them: files that
  // failed ("<file>: <problem>", left out) and how many parsed.
  const std::vector<std::string>& cdi_errors() const { return cdi_errors_; }
  std::size_t cdi_spec_files() const { return cdi_spec_files_; }
  const std::optional<NvmlAnswer>& nvml_answer() const { return nvml_; }

  BundleIndex& bundles() { return bundles_; }

  // The kubepods tree now (its directories kept open between scans: kubepods_scan.h).
  KubepodsTree scan() { return scanner_.scan(kubepods_); }
  // A directory of the tree was removed: the scan's descriptor of it goes now.
  void tree_dir_removed(const std::string& dir) { scanner_.forget(dir); }

  // Moves whenever an input of resolve() changed (checkpoint, PodResources, inventory,
  // bundles): a container resolved at the current generation need not be resolved again.
  std::uint64_t generation() const { return inputs_generation_ + bundles_.generation(); }
  ContainerTarget resolve(const DiscoveredContainer& cgroup);
  // A GPU container's exposure (node/exposure.h); reads its scope's unit files on the
  // systemd driver (systemd.unit_dirs).
  // Exposure, and on the systemd driver whether the scope restricts devices at all.
  void add_scope_policy(ContainerTarget& target) const;

 private:
  void add_device_spec_nodes();
  // Reads cdi.spec_dirs into fresh.cdi_devices and stats the host paths they name
  // (node_cdi.cpp).
  void load_cdi(Inventory& fresh);
  std::vector<std::string> cdi_errors_;
  std::size_t cdi_spec_files_ = 0;

  Config config_;
  Hierarchy hierarchy_;
  KubepodsLocation kubepods_;
  CheckpointState checkpoint_;
  AllocationIndex allocations_;
  std::optional<std::vector<PodResourcesContainer>> pod_resources_;
  MergedAllocations merged_;
  std::optional<std::string> boot_id_;
  std::uint64_t inputs_generation_ = 0;
  std::optional<std::uint64_t> allocations_generation_;  // generation() of the last rebuild
  struct FileStamp {
    ino_t inode = 0;
    off_t size = 0;
    long mtime_ns = 0;
    bool operator==(const FileStamp&) const = default;
  };
  std::optional<FileStamp> checkpoint_stamp_;  // of the file last parsed
  Inventory inventory_;
  std::optional<NvmlAnswer> nvml_;
  BundleIndex bundles_;
  KubepodsScanner scanner_{kept_scan_dirs_budget()};
};

// Reads a whole (small) file; errors name the path and errno text.
Result<std::string> read_text_file(const std::string& path, std::size_t max_bytes = 64 << 20);

}  // namespace gdw
