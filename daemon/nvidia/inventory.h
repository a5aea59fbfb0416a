// The host's NVIDIA devices: which driver majors exist, GPU UUID → minor, MIG capability
// minors, and the device nodes present under the dev root. Parsers take text; the reader
// walks <proc_root> and <dev_root>.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <string_view>
#include <vector>

#include "core/model.h"
#include "core/result.h"

namespace gdw {

// /proc/devices: the "Character devices:" section only; name → major.
Result<std::map<std::string, std::uint32_t>> parse_proc_devices(std::string_view text);

// /proc/driver/nvidia/gpus/<bus>/information: needs "GPU UUID" and "Device Minor".
Result<GpuDevice> parse_gpu_information(std::string_view text);

// /proc/driver/nvidia-caps/mig-minors: "<path> <minor>" lines.
Result<std::map<std::string, std::uint32_t>> parse_mig_minors(std::string_view text);

struct InventoryOptions {
  std::string proc_root = "/proc";
  std::string dev_root = "/dev";
  // MIG mappings the operator configured (devices.mig_map); NVML answers take precedence
  // for UUIDs it knows.
  std::vector<MigDevice> mig_map;
};

// Reads everything above. Missing files are normal on a node without the driver: the result
// is then empty, with a note in `problems`. Never blocks on NVML.
Inventory read_inventory(const InventoryOptions& options);

// stat()s <dev_root>/<name> for each name and records the character devices found.
void add_dev_nodes(Inventory& inventory, const std::string& dev_root, const std::vector<std::string>& names);

}  // namespace gdw
