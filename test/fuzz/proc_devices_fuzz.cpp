// /proc/devices parsing: no crash on any text, and what parses formats back to text that
// parses to the same majors.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string>
#include <string_view>

#include "nvidia/inventory.h"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  std::string_view text(reinterpret_cast<const char*>(data), size);
  auto majors = gdw::parse_proc_devices(text);
  if (!majors.ok()) return 0;
  std::string again = "Character devices:\n";
  for (const auto& [name, major] : *majors) again += std::to_string(major) + " " + name + "\n";
  auto reparsed = gdw::parse_proc_devices(again);
  if (!reparsed.ok() || *reparsed != *majors) std::abort();
  return 0;
}
