// parse_checkpoint on arbitrary text: no crash, its promises hold, and whatever it keeps
// survives write_checkpoint → parse_checkpoint unchanged with a valid checksum.
#include <cstdint>
#include <cstdlib>
#include <set>
#include <string_view>

#include "kubelet/checkpoint.h"

namespace {

void require(bool condition) {
  if (!condition) std::abort();
}

void check_promises(const gdw::Checkpoint& cp) {
  require(!cp.checksum_valid || (!cp.checksum_unverifiable && cp.computed_checksum == cp.stored_checksum));
  require(!cp.checksum_unverifiable || (cp.computed_checksum == 0 && !cp.checksum_valid));
  for (const auto& e : cp.entries) {
    require(!e.pod_uid.empty() && !e.container_name.empty() && !e.resource.empty());
    std::set<std::string> seen;
    for (const auto& id : e.device_ids) {
      require(!id.empty() && id.find("::") == std::string::npos && seen.insert(id).second);
    }
  }
  for (std::size_t i = 1; i < cp.entry_errors.size(); ++i) {
    require(cp.entry_errors[i - 1].index < cp.entry_errors[i].index);
  }
}

void check_rewrite(const gdw::Checkpoint& cp) {
  std::vector<gdw::CheckpointWriteEntry> entries;
  for (const auto& e : cp.entries) {
    entries.push_back({e.pod_uid, e.container_name, e.resource, {{0, e.device_ids}},
                       gdw::AllocResp{e.envs, e.device_specs, e.cdi_devices, e.annotations}});
  }
  auto again = gdw::parse_checkpoint(gdw::write_checkpoint(entries, cp.registered_devices, cp.boot_id));
  require(again.ok());
  require(again->checksum_valid && again->entry_errors.empty());
  require(again->registered_devices == cp.registered_devices && again->boot_id == cp.boot_id);
  require(again->entries.size() == cp.entries.size());
  for (std::size_t i = 0; i < cp.entries.size(); ++i) {
    const auto& a = cp.entries[i];
    const auto& b = again->entries[i];
    require(a.pod_uid == b.pod_uid && a.container_name == b.container_name && a.resource == b.resource);
    require(a.device_ids == b.device_ids && a.envs == b.envs && a.device_specs == b.device_specs);
    require(a.cdi_devices == b.cdi_devices && a.annotations == b.annotations);
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  std::string_view text(reinterpret_cast<const char*>(data), size);
  auto cp = gdw::parse_checkpoint(text);
  if (!cp.ok()) return 0;
  check_promises(*cp);
  check_rewrite(*cp);
  return 0;
}
