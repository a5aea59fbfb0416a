// Internal to the checkpoint module (and its tests): kubelet's checkpointData as Go's
// encoding/json leaves it after reading the file. It keeps what the JSON shape loses in
// AllocationEntry but the checksum sees: nil versus empty, raw NUMA keys, replica
// suffixes, empty IDs, the AllocResp bytes.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

namespace gdw::kubelet_checkpoint {

// A Go []string: std::nullopt is nil (JSON null or absent), distinct from an empty list.
using GoStrings = std::optional<std::vector<std::string>>;

// checkpoint.PodDevicesEntry (kubelet ≥ 1.20) or PodDevicesEntryV1 (≤ 1.19).
struct GoEntry {
  std::string pod_uid;
  std::string container_name;
  std::string resource_name;
  // DevicesPerNUMA (map[int64][]string); std::nullopt is a nil map. New schema only.
  std::optional<std::map<std::int64_t, GoStrings>> device_ids_by_numa;
  // DeviceIDs []string of the old schema.
  GoStrings device_ids_list;
  std::optional<std::string> alloc_resp;  // bytes after base64; std::nullopt is nil
};

struct GoData {
  bool legacy = false;  // the ≤ 1.19 schema: DeviceIDs hashed as ([]string)
  std::optional<std::vector<GoEntry>> entries;
  std::optional<std::map<std::string, GoStrings>> registered_devices;
};

// The text kubelet hashes: go-spew's "%#v" of checkpointData with sorted keys
// (k8s.io/apimachinery dump.ForHash), one line, strings unquoted.
std::string spew_text(const GoData& data);

}  // namespace gdw::kubelet_checkpoint
