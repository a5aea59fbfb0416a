// The device manager's checkpoint (kubelet_internal_checkpoint): parsed from text, checksum
// recomputed the way kubelet does (FNV-1a over a go-spew dump of Data), AllocResp decoded.
// Reading the file is the caller's job; this is pure.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "core/model.h"
#include "core/result.h"

namespace gdw {

// A problem with one PodDeviceEntries element. When the entry's DeviceIDs were still
// readable the entry is kept (only AllocResp lost); otherwise it is dropped.
struct CheckpointEntryError {
  std::size_t index = 0;  // position in PodDeviceEntries
  std::string pod_uid;
  std::string container_name;
  std::string resource;
  std::string message;
  bool entry_dropped = false;
};

struct Checkpoint {
  std::vector<AllocationEntry> entries;
  // As written (replica suffixes kept); a null list reads as empty.
  std::map<std::string, std::vector<std::string>> registered_devices;
  std::uint32_t stored_checksum = 0;
  std::uint32_t computed_checksum = 0;
  bool checksum_valid = false;
  // Set when the file holds something kubelet's own decoder would refuse (a wrong type,
  // bad base64, ...), so no checksum can be recomputed: computed_checksum stays 0 and
  // checksum_valid false. Says what and where.
  std::optional<std::string> checksum_unverifiable;
  bool legacy_device_ids = false;  // kubelet ≤ 1.19: DeviceIDs as a plain list
  std::optional<std::string> boot_id;
  std::vector<CheckpointEntryError> entry_errors;
};

// File-level errors (malformed JSON, no Data object, Checksum not a number) are an Error;
// per-entry problems land in entry_errors.
Result<Checkpoint> parse_checkpoint(std::string_view json_text);

// The building blocks, exposed for tests and fixture generation.
std::uint32_t fnv1a32(std::string_view data);
Result<std::string> base64_decode(std::string_view text);  // standard alphabet, padded
std::string base64_encode(std::string_view bytes);

struct AllocResp {
  std::map<std::string, std::string> envs;
  std::vector<DeviceSpec> devices;
  std::vector<std::string> cdi_devices;
  std::map<std::string, std::string> annotations;
};
Result<AllocResp> decode_alloc_resp(std::string_view protobuf_bytes);
std::string encode_alloc_resp(const AllocResp& resp);

// Serialises a checkpoint the way kubelet writes it (new schema), with a valid checksum.
// Used by the demo and tests to make valid fixtures.
struct CheckpointWriteEntry {
  std::string pod_uid;
  std::string container_name;
  std::string resource;
  std::map<std::int64_t, std::vector<std::string>> device_ids_by_numa;
  AllocResp alloc_resp;
};
std::string write_checkpoint(const std::vector<CheckpointWriteEntry>& entries,
                             const std::map<std::string, std::vector<std::string>>& registered,
                             const std::optional<std::string>& boot_id = std::nullopt);

}  // namespace gdw
