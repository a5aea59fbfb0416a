// parse_oci_config on arbitrary text, in each runtime's layout: no crash, and identity
// comes only from the runtime the layout names (never the other's keys).
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string_view>

#include "core/env_visible.h"
#include "runtime/oci_config.h"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  for (auto layout : {gdw::RuntimeKind::kUnknown, gdw::RuntimeKind::kContainerd, gdw::RuntimeKind::kCrio}) {
    auto info = gdw::parse_oci_config(text, layout);
    if (!info) continue;
    if (layout != gdw::RuntimeKind::kUnknown && info->runtime != gdw::RuntimeKind::kUnknown &&
        info->runtime != layout)
      std::abort();
    if (info->runtime == gdw::RuntimeKind::kUnknown &&
        (!info->pod_name.empty() || !info->container_name.empty() || !info->pod_namespace.empty()))
      std::abort();
    // NVIDIA_VISIBLE_DEVICES (tenant input) stays bounded, and so does what its parser keeps.
    if (info->nvidia_visible_devices) {
      if (info->nvidia_visible_devices->size() > gdw::kMaxEnvValue + 1) std::abort();
      auto request = gdw::parse_visible_devices(*info->nvidia_visible_devices);
      if (request.uuids.size() + request.indices.size() > gdw::kMaxVisibleDevicesEntries) std::abort();
    }
  }
  return 0;
}
