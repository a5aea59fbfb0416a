// Whether kubelet's device-manager checkpoint describes this host as it is now: a checkpoint
// written before a reboot (BootID) or naming GPUs the host does not have (a re-imaged or
// re-attached node) makes kubelet hand out devices that do not exist. Pure, except
// read_boot_id().
//
// The rule:
//   - boot: when the checkpoint has a BootID and the running boot id is known, they must be
//     equal; a checkpoint without BootID (older kubelets) is judged by its devices alone.
//   - devices: every device ID of a watched resource, in RegisteredDevices and in the pod
//     entries (replica suffix stripped), must be on the host:
//       GPU-…  known when /proc lists it; unverifiable when /proc lists no GPU at all (no
//              driver loaded: nothing to compare with);
//       MIG-…  known when a MIG mapping names it; an unknown MIG UUID is stale only when
//              NVML answered (it enumerates every MIG device); with no mapping or an
//              operator-configured one it is unverifiable (/proc never shows MIG UUIDs);
//       other  unverifiable (not an NVIDIA ID).
//   stale = boot id mismatch, or at least one unknown device.
#pragma once

#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "core/model.h"
#include "core/result.h"
#include "kubelet/checkpoint.h"

namespace gdw {

struct StaleCheckpointReport {
  bool stale = false;
  // Why stale, one sentence each; empty when not stale.
  std::vector<std::string> reasons;
  // Device IDs the host does not have; sorted, unique.
  std::vector<std::string> unknown_ids;
  // Device IDs that cannot be checked here (see the rule above); sorted, unique.
  std::vector<std::string> unverifiable_ids;
  bool boot_id_mismatch = false;
  std::optional<std::string> checkpoint_boot_id;
  std::optional<std::string> running_boot_id;
};

StaleCheckpointReport detect_stale_checkpoint(const Checkpoint& checkpoint, const Inventory& inventory,
                                              const std::optional<std::string>& running_boot_id,
                                              const std::vector<std::string>& resource_globs);

// The content of /proc/sys/kernel/random/boot_id: one UUID and a newline.
Result<std::string> parse_boot_id(std::string_view text);
// Reads <proc_root>/sys/kernel/random/boot_id.
Result<std::string> read_boot_id(const std::string& proc_root);

}  // namespace gdw
