#include <cstddef>
#include <cstdint>
#include <string_view>

#include "runtime/oci_config.h"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  (void)gdw::parse_oci_config(std::string_view(reinterpret_cast<const char*>(data), size));
  return 0;
}
