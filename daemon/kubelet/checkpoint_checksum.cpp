// kubelet's checkpoint checksum: FNV-1a 32 over go-spew's dump of the Data object.
//
// go-spew with "%#v" prints a type in parentheses before every value except slice
// elements and map keys/values, nil slices and maps as <nil>, strings verbatim, []uint8
// element by element in decimal, and (SortKeys) map keys in their natural order: int64
// numerically, strings bytewise.
#include <string>

#include "kubelet/checkpoint.h"
#include "kubelet/checkpoint_data.h"

namespace gdw {

std::uint32_t fnv1a32(std::string_view data) {
  std::uint32_t hash = 2166136261u;
  for (char c : data) {
    hash ^= static_cast<unsigned char>(c);
    hash *= 16777619u;
  }
  return hash;
}

namespace kubelet_checkpoint {
namespace {

constexpr std::string_view kNil = "<nil>";

void append_strings(std::string& out, const GoStrings& list) {
  if (!list) {
    out += kNil;
    return;
  }
  out += '[';
  for (std::size_t i = 0; i < list->size(); ++i) {
    if (i > 0) out += ' ';
    out += (*list)[i];
  }
  out += ']';
}

void append_bytes(std::string& out, const std::optional<std::string>& bytes) {
  if (!bytes) {
    out += kNil;
    return;
  }
  out += '[';
  for (std::size_t i = 0; i < bytes->size(); ++i) {
    if (i > 0) out += ' ';
    out += std::to_string(static_cast<unsigned char>((*bytes)[i]));
  }
  out += ']';
}

void append_entry(std::string& out, const GoEntry& entry, bool legacy) {
  out += "{PodUID:(string)";
  out += entry.pod_uid;
  out += " ContainerName:(string)";
  out += entry.container_name;
  out += " ResourceName:(string)";
  out += entry.resource_name;
  if (legacy) {
    out += " DeviceIDs:([]string)";
    append_strings(out, entry.device_ids_list);
  } else {
    out += " DeviceIDs:(checkpoint.DevicesPerNUMA)";
    if (!entry.device_ids_by_numa) {
      out += kNil;
    } else {
      out += "map[";
      bool first = true;
      for (const auto& [node, ids] : *entry.device_ids_by_numa) {  // std::map: numeric order
        if (!first) out += ' ';
        first = false;
        out += std::to_string(node);
        out += ':';
        append_strings(out, ids);
      }
      out += ']';
    }
  }
  out += " AllocResp:([]uint8)";
  append_bytes(out, entry.alloc_resp);
  out += '}';
}

// Replaces up to `limit` non-overlapping occurrences, left to right, like Go's strings.Replace.
std::string replace(const std::string& text, std::string_view from, std::string_view to, std::size_t limit) {
  std::string out;
  std::size_t pos = 0;
  for (std::size_t n = 0; n < limit; ++n) {
    std::size_t hit = text.find(from, pos);
    if (hit == std::string::npos) break;
    out.append(text, pos, hit - pos);
    out += to;
    pos = hit + from.size();
  }
  out.append(text, pos);
  return out;
}

}  // namespace

std::string spew_text(const GoData& data) {
  // Old-schema files: kubelet ≥ 1.20 spews its V1 types and then renames them to what 1.19
  // called them, in the data strings too: do the same so that both writers' files verify.
  std::string out = data.legacy
                        ? "(checkpoint.checkpointDataV1){PodDeviceEntries:([]checkpoint.PodDevicesEntryV1)"
                        : "(checkpoint.checkpointData){PodDeviceEntries:([]checkpoint.PodDevicesEntry)";
  if (!data.entries) {
    out += kNil;
  } else {
    out += '[';
    for (std::size_t i = 0; i < data.entries->size(); ++i) {
      if (i > 0) out += ' ';
      append_entry(out, (*data.entries)[i], data.legacy);
    }
    out += ']';
  }
  out += " RegisteredDevices:(map[string][]string)";
  if (!data.registered_devices) {
    out += kNil;
  } else {
    out += "map[";
    bool first = true;
    // std::map<std::string> orders by char_traits<char>, which compares as unsigned char:
    // the same bytewise order as Go's string comparison.
    for (const auto& [resource, ids] : *data.registered_devices) {
      if (!first) out += ' ';
      first = false;
      out += resource;
      out += ':';
      append_strings(out, ids);
    }
    out += ']';
  }
  out += '}';
  if (!data.legacy) return out;
  out = replace(out, "checkpointDataV1", "checkpointData", 1);
  return replace(out, "PodDevicesEntryV1", "PodDevicesEntry", std::string::npos);
}

}  // namespace kubelet_checkpoint
}  // namespace gdw
