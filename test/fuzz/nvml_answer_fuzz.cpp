// The nvml-query child's JSON as the daemon reads it: no crash or exception on any text,
// and an accepted answer survives format → parse unchanged.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string_view>

#include "nvidia/nvml.h"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  std::string_view text(reinterpret_cast<const char*>(data), size);
  auto answer = gdw::parse_nvml_answer(text);
  if (!answer.ok()) return 0;
  auto reparsed = gdw::parse_nvml_answer(gdw::format_nvml_answer(*answer));
  if (!reparsed.ok() || reparsed->migs != answer->migs || reparsed->gpus.size() != answer->gpus.size()) std::abort();
  for (std::size_t i = 0; i < answer->gpus.size(); ++i)
    if (reparsed->gpus[i].minor != answer->gpus[i].minor) std::abort();
  return 0;
}
