// devices.list parsing and evaluation, and single-rule parsing/formatting round trips.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string_view>

#include "core/device_rule.h"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  std::string_view text(reinterpret_cast<const char*>(data), size);
  if (auto list = gdw::parse_devices_list(text); list.ok()) {
    gdw::device_list_allows(*list, {gdw::DeviceType::kChar, 195, 0}, gdw::kAccessReadWrite);
    for (const auto& rule : list->exceptions) {
      // Whatever parsed must format to text that parses back to the same rule.
      auto again = gdw::parse_device_rule(gdw::format_device_rule(rule));
      if (!again.ok() || !(*again == rule)) std::abort();
    }
  }
  return 0;
}
