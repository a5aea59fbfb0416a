// kubelet_internal_checkpoint: JSON → Go's view of it (for the checksum) → AllocationEntry.
//
// Two questions are answered separately for every value: can gpu-devwatch use it, and would
// kubelet's own json.Unmarshal have accepted it. Only in the second case can the checksum be
// recomputed; where Go's decoding is lenient (null for a string is "", a missing field is
// its zero value) this reader is exactly as lenient when building the hashed view.
#include <nlohmann/json.hpp>

#include <charconv>
#include <limits>
#include <set>

#include "core/desired_state.h"
#include "kubelet/checkpoint.h"
#include "kubelet/checkpoint_data.h"

namespace gdw {
namespace {

using nlohmann::json;
using kubelet_checkpoint::GoData;
using kubelet_checkpoint::GoEntry;
using kubelet_checkpoint::GoStrings;

std::string describe(const json& value) {
  switch (value.type()) {
    case json::value_t::null: return "null";
    case json::value_t::boolean: return "a boolean";
    case json::value_t::number_integer:
    case json::value_t::number_unsigned:
    case json::value_t::number_float: return "a number";
    case json::value_t::string: return "a string";
    case json::value_t::array: return "a list";
    case json::value_t::object: return "an object";
    default: return "not a JSON value";
  }
}

std::string in_quotes(const std::string& s) { return "\"" + s + "\""; }

// Go's strconv.ParseInt(key, 10, 64), which encoding/json uses for map[int64] keys: an
// optional sign, decimal digits (leading zeros allowed), no spaces.
std::optional<std::int64_t> parse_numa_node(const std::string& key) {
  std::string_view digits = key;
  if (!digits.empty() && digits.front() == '+') {
    digits.remove_prefix(1);
    if (digits.empty() || digits.front() == '-') return std::nullopt;
  }
  std::int64_t node = 0;
  auto [end, ec] = std::from_chars(digits.data(), digits.data() + digits.size(), node);
  if (ec != std::errc() || end != digits.data() + digits.size()) return std::nullopt;
  return node;
}

// One entry's reading. `unusable`: gpu-devwatch cannot use the entry. `go_rejects`: kubelet
// would not have loaded the file, so the checksum cannot be reproduced.
struct EntryReading {
  GoEntry go;
  enum class IdsShape { kNil, kNumaMap, kList } ids_shape = IdsShape::kNil;
  std::optional<std::string> unusable;
  std::optional<std::string> alloc_resp_error;
  std::optional<std::string> go_rejects;
  AllocResp alloc_resp;
};

void note(std::optional<std::string>& slot, std::string message) {
  if (!slot) slot = std::move(message);
}

// A Go string field: absent or null leave it "".
void read_string_field(const json& object, const char* key, std::string& out, EntryReading& r) {
  auto it = object.find(key);
  if (it == object.end() || it->is_null()) {
    note(r.unusable, std::string(key) + " is missing");
    return;
  }
  if (!it->is_string()) {
    std::string problem = std::string(key) + " is " + describe(*it) + ", expected a string";
    note(r.unusable, problem);
    note(r.go_rejects, problem);
    return;
  }
  out = it->get<std::string>();
  if (out.empty()) note(r.unusable, std::string(key) + " is empty");
}

// A Go []string: null is nil, a null element is "".
Result<GoStrings> read_strings(const json& value, const std::string& where) {
  if (value.is_null()) return GoStrings{};
  if (!value.is_array()) return Error{where + " is " + describe(value) + ", expected a list of device IDs"};
  std::vector<std::string> out;
  out.reserve(value.size());
  for (std::size_t i = 0; i < value.size(); ++i) {
    const json& element = value[i];
    if (element.is_null()) {
      out.emplace_back();
    } else if (element.is_string()) {
      out.push_back(element.get<std::string>());
    } else {
      return Error{where + "[" + std::to_string(i) + "] is " + describe(element) + ", expected a string"};
    }
  }
  return GoStrings{std::move(out)};
}

void read_device_ids(const json& object, EntryReading& r) {
  auto it = object.find("DeviceIDs");
  if (it == object.end() || it->is_null()) return;  // nil: an entry holding no device
  const json& ids = *it;
  if (ids.is_array()) {
    r.ids_shape = EntryReading::IdsShape::kList;
    auto list = read_strings(ids, "DeviceIDs");
    if (!list) {
      note(r.unusable, list.error().message);
      note(r.go_rejects, list.error().message);
      return;
    }
    r.go.device_ids_list = std::move(*list);
    return;
  }
  if (!ids.is_object()) {
    std::string problem = "DeviceIDs is " + describe(ids) +
                          ", expected an object of NUMA node → device IDs or a list of device IDs";
    note(r.unusable, problem);
    note(r.go_rejects, problem);
    return;
  }
  r.ids_shape = EntryReading::IdsShape::kNumaMap;
  std::map<std::int64_t, GoStrings> by_node;
  std::map<std::int64_t, std::string> key_of_node;
  for (const auto& [key, value] : ids.items()) {
    std::string where = "DeviceIDs[" + in_quotes(key) + "]";
    auto node = parse_numa_node(key);
    if (!node) {
      std::string problem = "DeviceIDs key " + in_quotes(key) + " is not a NUMA node number";
      note(r.unusable, problem);
      note(r.go_rejects, problem);
      return;
    }
    auto list = read_strings(value, where);
    if (!list) {
      note(r.unusable, list.error().message);
      note(r.go_rejects, list.error().message);
      return;
    }
    auto [slot, inserted] = by_node.try_emplace(*node, std::move(*list));
    if (inserted) {
      key_of_node.emplace(*node, key);
      continue;
    }
    // Go keeps whichever of the two keys comes last in the file; the parsed JSON no longer
    // knows that order. Keep both lists' IDs for use, give up on the checksum.
    note(r.go_rejects, "DeviceIDs keys " + in_quotes(key_of_node[*node]) + " and " + in_quotes(key) +
                           " name the same NUMA node");
    if (*list) {
      if (!slot->second) slot->second.emplace();
      slot->second->insert(slot->second->end(), (*list)->begin(), (*list)->end());
    }
  }
  r.go.device_ids_by_numa = std::move(by_node);
}

void read_alloc_resp(const json& object, EntryReading& r) {
  auto it = object.find("AllocResp");
  if (it == object.end() || it->is_null()) return;
  if (!it->is_string()) {
    std::string problem = "AllocResp is " + describe(*it) + ", expected a base64 string";
    note(r.alloc_resp_error, problem);
    note(r.go_rejects, problem);
    return;
  }
  auto bytes = base64_decode(it->get_ref<const std::string&>());
  if (!bytes) {
    std::string problem = "AllocResp: " + bytes.error().message;
    note(r.alloc_resp_error, problem);
    note(r.go_rejects, problem);
    return;
  }
  // kubelet itself only decodes AllocResp when a container starts: an undecodable one still
  // loads and hashes.
  auto resp = decode_alloc_resp(*bytes);
  if (resp) {
    r.alloc_resp = std::move(*resp);
  } else {
    note(r.alloc_resp_error, "AllocResp: " + resp.error().message);
  }
  r.go.alloc_resp = std::move(*bytes);
}

EntryReading read_entry(const json& element) {
  EntryReading r;
  if (element.is_null()) {  // Go: a zero PodDevicesEntry
    note(r.unusable, "entry is null");
    return r;
  }
  if (!element.is_object()) {
    std::string problem = "entry is " + describe(element) + ", expected an object";
    note(r.unusable, problem);
    note(r.go_rejects, problem);
    return r;
  }
  read_string_field(element, "PodUID", r.go.pod_uid, r);
  read_string_field(element, "ContainerName", r.go.container_name, r);
  read_string_field(element, "ResourceName", r.go.resource_name, r);
  read_device_ids(element, r);
  read_alloc_resp(element, r);
  return r;
}

// Replica suffixes stripped, then deduplicated in first-seen order: NUMA nodes ascending.
std::vector<std::string> usable_device_ids(const GoEntry& go) {
  std::vector<std::string> ids;
  std::set<std::string> seen;
  auto add = [&](const GoStrings& list) {
    if (!list) return;
    for (const auto& raw : *list) {
      std::string id = strip_replica_suffix(raw);
      if (!id.empty() && seen.insert(id).second) ids.push_back(std::move(id));
    }
  };
  if (go.device_ids_by_numa) {
    for (const auto& [node, list] : *go.device_ids_by_numa) add(list);
  }
  add(go.device_ids_list);
  return ids;
}

AllocationEntry to_allocation(EntryReading&& r) {
  AllocationEntry entry;
  entry.device_ids = usable_device_ids(r.go);
  entry.pod_uid = r.go.pod_uid;
  entry.container_name = r.go.container_name;
  entry.resource = r.go.resource_name;
  entry.envs = std::move(r.alloc_resp.envs);
  entry.device_specs = std::move(r.alloc_resp.devices);
  entry.cdi_devices = std::move(r.alloc_resp.cdi_devices);
  entry.annotations = std::move(r.alloc_resp.annotations);
  entry.alloc_resp_error = std::move(r.alloc_resp_error);
  return entry;
}

// What the Data object yields: the hashed view, or why kubelet could not have loaded it.
struct DataReading {
  GoData go;
  std::optional<std::string> go_rejects;
  std::vector<AllocationEntry> entries;
  std::vector<CheckpointEntryError> entry_errors;
  std::map<std::string, std::vector<std::string>> registered_devices;
};

// kubelet decodes into a checkpoint pre-filled with an empty list and an empty map: a field
// missing from the file stays empty (not nil), while JSON null makes it nil.
Result<DataReading> read_data(const json& data) {
  DataReading out;
  out.go.entries.emplace();
  out.go.registered_devices.emplace();

  if (auto it = data.find("PodDeviceEntries"); it != data.end()) {
    if (it->is_null()) {
      out.go.entries.reset();
    } else if (!it->is_array()) {
      return Error{"Data.PodDeviceEntries is " + describe(*it) + ", expected a list or null"};
    } else {
      bool saw_numa_map = false;
      bool saw_list = false;
      out.go.entries->reserve(it->size());
      for (std::size_t i = 0; i < it->size(); ++i) {
        EntryReading r = read_entry((*it)[i]);
        std::string where = "Data.PodDeviceEntries[" + std::to_string(i) + "]";
        saw_numa_map |= r.ids_shape == EntryReading::IdsShape::kNumaMap;
        saw_list |= r.ids_shape == EntryReading::IdsShape::kList;
        if (saw_numa_map && saw_list) {
          note(out.go_rejects, where + ": DeviceIDs mixes the ≤ 1.19 list form and the NUMA map form");
        }
        if (r.go_rejects) note(out.go_rejects, where + ": " + *r.go_rejects);
        out.go.entries->push_back(r.go);

        CheckpointEntryError error{i, r.go.pod_uid, r.go.container_name, r.go.resource_name, "", false};
        if (r.unusable) {
          error.message = *r.unusable;
          error.entry_dropped = true;
          out.entry_errors.push_back(std::move(error));
          continue;
        }
        if (r.alloc_resp_error) {
          error.message = *r.alloc_resp_error;
          out.entry_errors.push_back(std::move(error));
        }
        out.entries.push_back(to_allocation(std::move(r)));
      }
      out.go.legacy = saw_list;
    }
  }

  if (auto it = data.find("RegisteredDevices"); it != data.end()) {
    if (it->is_null()) {
      out.go.registered_devices.reset();
    } else if (!it->is_object()) {
      return Error{"Data.RegisteredDevices is " + describe(*it) + ", expected an object or null"};
    } else {
      for (const auto& [resource, value] : it->items()) {
        auto ids = read_strings(value, "Data.RegisteredDevices[" + in_quotes(resource) + "]");
        if (!ids) {  // informational only: skip it, but kubelet would refuse the file
          note(out.go_rejects, ids.error().message);
          continue;
        }
        out.registered_devices[resource] = ids->value_or(std::vector<std::string>{});
        out.go.registered_devices->emplace(resource, std::move(*ids));
      }
    }
  }
  return out;
}

}  // namespace

Result<Checkpoint> parse_checkpoint(std::string_view json_text) {
  json doc;
  try {
    doc = json::parse(json_text);
  } catch (const json::exception& e) {  // parse_error says where: byte offset, line, column
    return Error{std::string("cannot parse checkpoint JSON: ") + e.what()};
  }
  if (!doc.is_object()) return Error{"checkpoint is " + describe(doc) + ", expected an object"};

  auto data = doc.find("Data");
  if (data == doc.end()) return Error{"checkpoint has no Data"};
  if (!data->is_object()) return Error{"checkpoint Data is " + describe(*data) + ", expected an object"};

  auto checksum = doc.find("Checksum");
  if (checksum == doc.end()) return Error{"checkpoint has no Checksum"};
  if (!checksum->is_number()) {
    return Error{"checkpoint Checksum is " + describe(*checksum) + ", expected an unsigned 32-bit integer"};
  }
  if (!checksum->is_number_unsigned() ||
      checksum->get<std::uint64_t>() > std::numeric_limits<std::uint32_t>::max()) {
    return Error{"checkpoint Checksum " + checksum->dump() + " is not an unsigned 32-bit integer"};
  }

  auto reading = read_data(*data);
  if (!reading) return with_context("checkpoint", reading.error());

  Checkpoint cp;
  cp.entries = std::move(reading->entries);
  cp.entry_errors = std::move(reading->entry_errors);
  cp.registered_devices = std::move(reading->registered_devices);
  cp.legacy_device_ids = reading->go.legacy;
  cp.stored_checksum = static_cast<std::uint32_t>(checksum->get<std::uint64_t>());
  cp.checksum_unverifiable = std::move(reading->go_rejects);
  if (!cp.checksum_unverifiable) {
    cp.computed_checksum = fnv1a32(kubelet_checkpoint::spew_text(reading->go));
    cp.checksum_valid = cp.computed_checksum == cp.stored_checksum;
  }
  if (auto boot_id = doc.find("BootID"); boot_id != doc.end() && boot_id->is_string()) {
    cp.boot_id = boot_id->get<std::string>();
  }
  return cp;
}

std::string write_checkpoint(const std::vector<CheckpointWriteEntry>& entries,
                             const std::map<std::string, std::vector<std::string>>& registered,
                             const std::optional<std::string>& boot_id) {
  // Key order as Go's json.Marshal writes the structs, for fixtures that look like kubelet's.
  using ordered = nlohmann::ordered_json;
  ordered data = ordered::object();
  ordered pod_entries = nullptr;  // kubelet writes a nil slice when no container holds a device
  for (const auto& e : entries) {
    ordered ids = ordered::object();
    for (const auto& [node, list] : e.device_ids_by_numa) ids[std::to_string(node)] = list;
    ordered entry = ordered::object();
    entry["PodUID"] = e.pod_uid;
    entry["ContainerName"] = e.container_name;
    entry["ResourceName"] = e.resource;
    entry["DeviceIDs"] = std::move(ids);
    entry["AllocResp"] = base64_encode(encode_alloc_resp(e.alloc_resp));
    pod_entries.push_back(std::move(entry));
  }
  data["PodDeviceEntries"] = std::move(pod_entries);
  data["RegisteredDevices"] = registered;

  // Invalid UTF-8 becomes U+FFFD here, as in Go's encoder; hashing the text read back
  // keeps the checksum true to what the file says.
  std::string data_text = data.dump(-1, ' ', false, ordered::error_handler_t::replace);
  std::uint32_t checksum = 0;
  json reread = json::parse(data_text, nullptr, false);
  if (auto reading = read_data(reread); reading && !reading->go_rejects) {
    checksum = fnv1a32(kubelet_checkpoint::spew_text(reading->go));
  }
  std::string out = "{\"Data\":" + data_text + ",\"Checksum\":" + std::to_string(checksum);
  if (boot_id) {
    out += ",\"BootID\":" + json(*boot_id).dump(-1, ' ', false, json::error_handler_t::replace);
  }
  out += '}';
  return out;
}

}  // namespace gdw
