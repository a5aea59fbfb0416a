#include <cstddef>
#include <cstdint>
#include <string_view>

#include "core/config.h"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  (void)gdw::parse_config(std::string_view(reinterpret_cast<const char*>(data), size), "fuzz.yaml");
  return 0;
}
