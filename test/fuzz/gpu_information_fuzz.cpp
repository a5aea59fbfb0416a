// gpus/<bus>/information parsing: no crash on any text, a parsed UUID is a GPU UUID, and
// the fields format back to text that parses to the same GPU.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string>
#include <string_view>

#include "nvidia/inventory.h"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  std::string_view text(reinterpret_cast<const char*>(data), size);
  auto gpu = gdw::parse_gpu_information(text);
  if (!gpu.ok()) return 0;
  if (gpu->uuid.rfind("GPU-", 0) != 0) std::abort();
  std::string again = "Model: " + gpu->model + "\nGPU UUID: " + gpu->uuid + "\nBus Location: " + gpu->bus_location +
                      "\nDevice Minor: " + std::to_string(gpu->minor) +
                      "\nGPU Excluded: " + (gpu->excluded ? "Yes" : "No") + "\n";
  auto reparsed = gdw::parse_gpu_information(again);
  if (!reparsed.ok() || reparsed->uuid != gpu->uuid || reparsed->minor != gpu->minor ||
      reparsed->model != gpu->model || reparsed->bus_location != gpu->bus_location ||
      reparsed->excluded != gpu->excluded)
    std::abort();
  return 0;
}
