#include "core/model.h"

namespace gdw {

std::optional<std::uint32_t> Inventory::char_major(const std::string& name) const {
  auto it = char_majors.find(name);
  if (it == char_majors.end()) return std::nullopt;
  return it->second;
}

std::optional<std::uint32_t> Inventory::nvidia_major() const {
  if (auto m = char_major("nvidia")) return m;
  if (auto m = char_major("nvidiactl")) return m;
  return char_major("nvidia-frontend");
}

const GpuDevice* Inventory::gpu_by_uuid(const std::string& uuid) const {
  for (const auto& g : gpus)
    if (g.uuid == uuid) return &g;
  return nullptr;
}

const MigDevice* Inventory::mig_by_uuid(const std::string& uuid) const {
  for (const auto& m : migs)
    if (m.uuid == uuid) return &m;
  return nullptr;
}

}  // namespace gdw
