// The JSON that `gpu-devwatch nvml-query` prints, and how an answer joins the inventory.
#include "nvidia/nvml.h"

#include <algorithm>
#include <limits>

#include <nlohmann/json.hpp>

namespace gdw {
namespace {

using nlohmann::json;

Result<std::string> string_field(const json& object, const char* key, const std::string& where) {
  auto it = object.find(key);
  if (it == object.end()) return Error{where + ": missing \"" + key + "\""};
  if (!it->is_string()) return Error{where + ": \"" + key + "\" must be a string"};
  return it->get<std::string>();
}

Result<std::uint32_t> u32_field(const json& object, const char* key, const std::string& where) {
  auto it = object.find(key);
  if (it == object.end()) return Error{where + ": missing \"" + key + "\""};
  if (!it->is_number_unsigned() || it->get<std::uint64_t>() > std::numeric_limits<std::uint32_t>::max())
    return Error{where + ": \"" + key + "\" must be an unsigned 32-bit number"};
  return static_cast<std::uint32_t>(it->get<std::uint64_t>());
}

Result<const json*> array_field(const json& object, const char* key) {
  auto it = object.find(key);
  if (it == object.end()) return Error{std::string("missing \"") + key + "\""};
  if (!it->is_array()) return Error{std::string("\"") + key + "\" must be an array"};
  return &*it;
}

Result<GpuDevice> parse_gpu(const json& item, const std::string& where) {
  if (!item.is_object()) return Error{where + ": must be an object"};
  auto uuid = string_field(item, "uuid", where);
  if (!uuid) return uuid.error();
  auto minor = u32_field(item, "minor", where);
  if (!minor) return minor.error();
  GpuDevice gpu;
  gpu.uuid = std::move(*uuid);
  gpu.minor = *minor;
  return gpu;
}

Result<MigDevice> parse_mig(const json& item, const std::string& where) {
  if (!item.is_object()) return Error{where + ": must be an object"};
  auto uuid = string_field(item, "uuid", where);
  if (!uuid) return uuid.error();
  auto gpu_minor = u32_field(item, "gpu_minor", where);
  if (!gpu_minor) return gpu_minor.error();
  auto gpu_instance = u32_field(item, "gpu_instance", where);
  if (!gpu_instance) return gpu_instance.error();
  auto compute_instance = u32_field(item, "compute_instance", where);
  if (!compute_instance) return compute_instance.error();
  return MigDevice{std::move(*uuid), *gpu_minor, *gpu_instance, *compute_instance};
}

Result<NvmlAnswer> parse_answer_document(const json& doc) {
  if (!doc.is_object()) return Error{"the answer must be a JSON object"};
  NvmlAnswer answer;
  auto version = string_field(doc, "driver_version", "answer");
  if (!version) return version.error();
  answer.driver_version = std::move(*version);

  auto gpus = array_field(doc, "gpus");
  if (!gpus) return gpus.error();
  for (std::size_t i = 0; i < (*gpus)->size(); ++i) {
    auto gpu = parse_gpu((**gpus)[i], "gpus[" + std::to_string(i) + "]");
    if (!gpu) return gpu.error();
    answer.gpus.push_back(std::move(*gpu));
  }
  auto migs = array_field(doc, "migs");
  if (!migs) return migs.error();
  for (std::size_t i = 0; i < (*migs)->size(); ++i) {
    auto mig = parse_mig((**migs)[i], "migs[" + std::to_string(i) + "]");
    if (!mig) return mig.error();
    answer.migs.push_back(std::move(*mig));
  }
  return answer;
}

}  // namespace

std::string format_nvml_answer(const NvmlAnswer& answer) {
  json gpus = json::array();
  for (const auto& gpu : answer.gpus) gpus.push_back({{"uuid", gpu.uuid}, {"minor", gpu.minor}});
  json migs = json::array();
  for (const auto& mig : answer.migs)
    migs.push_back({{"uuid", mig.uuid},
                    {"gpu_minor", mig.gpu_minor},
                    {"gpu_instance", mig.gpu_instance},
                    {"compute_instance", mig.compute_instance}});
  json doc = {{"driver_version", answer.driver_version}, {"gpus", std::move(gpus)}, {"migs", std::move(migs)}};
  // Strings come from the driver; invalid UTF-8 must not make dump() throw.
  return doc.dump(-1, ' ', false, json::error_handler_t::replace);
}

Result<NvmlAnswer> parse_nvml_answer(std::string_view json_text) {
  try {
    json doc = json::parse(json_text, nullptr, /*allow_exceptions=*/false);
    if (doc.is_discarded()) return Error{"NVML answer is not valid JSON"};
    auto answer = parse_answer_document(doc);
    if (!answer) return with_context("NVML answer", answer.error());
    return answer;
  } catch (const std::exception& e) {
    return Error{std::string("NVML answer: ") + e.what()};
  }
}

void merge_nvml_answer(Inventory& inventory, const NvmlAnswer& answer) {
  for (const auto& gpu : answer.gpus)
    if (!inventory.gpu_by_uuid(gpu.uuid)) inventory.gpus.push_back(gpu);
  for (const auto& mig : answer.migs) {
    auto known = std::find_if(inventory.migs.begin(), inventory.migs.end(),
                              [&](const MigDevice& m) { return m.uuid == mig.uuid; });
    if (known != inventory.migs.end()) {
      *known = mig;
    } else {
      inventory.migs.push_back(mig);
    }
  }
  if (!answer.migs.empty()) inventory.mig_source = "nvml";
}

}  // namespace gdw
