// nvidia-caps/mig-minors parsing: no crash on any text, and what parses formats back to
// text that parses to the same map.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string>
#include <string_view>

#include "nvidia/inventory.h"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  std::string_view text(reinterpret_cast<const char*>(data), size);
  auto minors = gdw::parse_mig_minors(text);
  if (!minors.ok()) return 0;
  std::string again;
  for (const auto& [path, minor] : *minors) again += path + " " + std::to_string(minor) + "\n";
  auto reparsed = gdw::parse_mig_minors(again);
  if (!reparsed.ok() || *reparsed != *minors) std::abort();
  return 0;
}
