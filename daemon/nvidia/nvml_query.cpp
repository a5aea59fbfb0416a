// The `nvml-query` child: loads NVML at run time and prints what it knows about GPUs and
// MIG devices. It runs in its own process (see nvml.h), so it may block or crash without
// harming the daemon; this file only has to report clearly.
#include "nvidia/nvml.h"

#include <dlfcn.h>

#include <cstdio>
#include <exception>
#include <string>
#include <utility>

namespace gdw {
namespace {

// The few NVML types used here, as NVIDIA's public API documentation defines them: return
// codes are a C enum, device handles opaque pointers.
using nvmlReturn_t = int;
using nvmlDevice_t = struct NvmlDeviceOpaque*;
constexpr nvmlReturn_t kNvmlSuccess = 0;
constexpr nvmlReturn_t kNvmlErrorNotSupported = 3;
constexpr nvmlReturn_t kNvmlErrorNotFound = 6;
// NVML_DEVICE_UUID_V2_BUFFER_SIZE and NVML_SYSTEM_DRIVER_VERSION_BUFFER_SIZE.
constexpr unsigned kUuidBufferSize = 96;
constexpr unsigned kDriverVersionBufferSize = 80;

constexpr int kExitLoadFailed = 3;
constexpr int kExitNvmlError = 4;

struct NvmlApi {
  nvmlReturn_t (*init)() = nullptr;
  nvmlReturn_t (*shutdown)() = nullptr;
  const char* (*error_string)(nvmlReturn_t) = nullptr;  // only for messages; optional
  nvmlReturn_t (*driver_version)(char*, unsigned) = nullptr;
  nvmlReturn_t (*device_count)(unsigned*) = nullptr;
  nvmlReturn_t (*device_by_index)(unsigned, nvmlDevice_t*) = nullptr;
  nvmlReturn_t (*device_uuid)(nvmlDevice_t, char*, unsigned) = nullptr;
  nvmlReturn_t (*device_minor)(nvmlDevice_t, unsigned*) = nullptr;
  // MIG entry points exist only in drivers from R450 on; without them there are no MIGs.
  nvmlReturn_t (*max_mig_count)(nvmlDevice_t, unsigned*) = nullptr;
  nvmlReturn_t (*mig_by_index)(nvmlDevice_t, unsigned, nvmlDevice_t*) = nullptr;
  nvmlReturn_t (*gpu_instance_id)(nvmlDevice_t, unsigned*) = nullptr;
  nvmlReturn_t (*compute_instance_id)(nvmlDevice_t, unsigned*) = nullptr;

  bool has_mig() const { return max_mig_count && mig_by_index && gpu_instance_id && compute_instance_id; }
};

template <class Fn>
void resolve(void* library, const char* name, Fn& fn) {
  fn = reinterpret_cast<Fn>(::dlsym(library, name));
}

Result<NvmlApi> load_api(const std::string& path) {
  void* library = ::dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (!library) {
    const char* why = ::dlerror();
    return Error{"cannot load " + path + ": " + (why ? why : "unknown dlopen error")};
  }
  // Never dlclose()d: the process exits right after the query, and unloading a driver
  // library with live threads is a classic way to crash at exit.
  NvmlApi api;
  resolve(library, "nvmlInit_v2", api.init);
  resolve(library, "nvmlShutdown", api.shutdown);
  resolve(library, "nvmlErrorString", api.error_string);
  resolve(library, "nvmlSystemGetDriverVersion", api.driver_version);
  resolve(library, "nvmlDeviceGetCount_v2", api.device_count);
  resolve(library, "nvmlDeviceGetHandleByIndex_v2", api.device_by_index);
  resolve(library, "nvmlDeviceGetUUID", api.device_uuid);
  resolve(library, "nvmlDeviceGetMinorNumber", api.device_minor);
  resolve(library, "nvmlDeviceGetMaxMigDeviceCount", api.max_mig_count);
  resolve(library, "nvmlDeviceGetMigDeviceHandleByIndex", api.mig_by_index);
  resolve(library, "nvmlDeviceGetGpuInstanceId", api.gpu_instance_id);
  resolve(library, "nvmlDeviceGetComputeInstanceId", api.compute_instance_id);

  const std::pair<const char*, bool> required[] = {
      {"nvmlInit_v2", api.init != nullptr},
      {"nvmlShutdown", api.shutdown != nullptr},
      {"nvmlSystemGetDriverVersion", api.driver_version != nullptr},
      {"nvmlDeviceGetCount_v2", api.device_count != nullptr},
      {"nvmlDeviceGetHandleByIndex_v2", api.device_by_index != nullptr},
      {"nvmlDeviceGetUUID", api.device_uuid != nullptr},
      {"nvmlDeviceGetMinorNumber", api.device_minor != nullptr},
  };
  for (const auto& [name, found] : required)
    if (!found) return Error{path + " has no " + name + "; is it NVML?"};
  return api;
}

Error nvml_error(const NvmlApi& api, const std::string& call, nvmlReturn_t code) {
  const char* text = api.error_string ? api.error_string(code) : nullptr;
  return Error{call + " failed: " + (text ? text : "NVML error") + " (" + std::to_string(code) + ")"};
}

Result<std::string> device_uuid(const NvmlApi& api, nvmlDevice_t device, const std::string& what) {
  char buf[kUuidBufferSize] = {};
  if (auto r = api.device_uuid(device, buf, sizeof buf); r != kNvmlSuccess)
    return nvml_error(api, "nvmlDeviceGetUUID(" + what + ")", r);
  buf[sizeof buf - 1] = '\0';
  return std::string(buf);
}

// Appends the MIG devices of one GPU. Empty slots answer NOT_FOUND; a GPU or driver
// without MIG answers NOT_SUPPORTED or a count of zero.
Status add_migs(const NvmlApi& api, nvmlDevice_t gpu, unsigned gpu_index, std::uint32_t gpu_minor,
                std::vector<MigDevice>& out) {
  if (!api.has_mig()) return {};
  std::string where = "GPU " + std::to_string(gpu_index);
  unsigned slots = 0;
  auto r = api.max_mig_count(gpu, &slots);
  if (r == kNvmlErrorNotSupported) return {};
  if (r != kNvmlSuccess) return nvml_error(api, "nvmlDeviceGetMaxMigDeviceCount(" + where + ")", r);
  for (unsigned slot = 0; slot < slots; ++slot) {
    std::string mig_where = where + " MIG " + std::to_string(slot);
    nvmlDevice_t mig = nullptr;
    r = api.mig_by_index(gpu, slot, &mig);
    if (r == kNvmlErrorNotFound) continue;
    if (r != kNvmlSuccess) return nvml_error(api, "nvmlDeviceGetMigDeviceHandleByIndex(" + mig_where + ")", r);
    auto uuid = device_uuid(api, mig, mig_where);
    if (!uuid) return uuid.error();
    unsigned gi = 0, ci = 0;
    r = api.gpu_instance_id(mig, &gi);
    if (r != kNvmlSuccess) return nvml_error(api, "nvmlDeviceGetGpuInstanceId(" + mig_where + ")", r);
    r = api.compute_instance_id(mig, &ci);
    if (r != kNvmlSuccess) return nvml_error(api, "nvmlDeviceGetComputeInstanceId(" + mig_where + ")", r);
    out.push_back(MigDevice{std::move(*uuid), gpu_minor, gi, ci});
  }
  return {};
}

// Called between nvmlInit_v2 and nvmlShutdown.
Result<NvmlAnswer> query(const NvmlApi& api) {
  NvmlAnswer answer;
  char version[kDriverVersionBufferSize] = {};
  if (auto r = api.driver_version(version, sizeof version); r != kNvmlSuccess)
    return nvml_error(api, "nvmlSystemGetDriverVersion", r);
  version[sizeof version - 1] = '\0';
  answer.driver_version = version;

  unsigned count = 0;
  if (auto r = api.device_count(&count); r != kNvmlSuccess) return nvml_error(api, "nvmlDeviceGetCount_v2", r);
  for (unsigned index = 0; index < count; ++index) {
    std::string where = "GPU " + std::to_string(index);
    nvmlDevice_t device = nullptr;
    if (auto r = api.device_by_index(index, &device); r != kNvmlSuccess)
      return nvml_error(api, "nvmlDeviceGetHandleByIndex_v2(" + where + ")", r);
    auto uuid = device_uuid(api, device, where);
    if (!uuid) return uuid.error();
    unsigned minor = 0;
    if (auto r = api.device_minor(device, &minor); r != kNvmlSuccess)
      return nvml_error(api, "nvmlDeviceGetMinorNumber(" + where + ")", r);
    answer.gpus.push_back(GpuDevice{*uuid, minor, {}, {}, false});
    if (auto migs = add_migs(api, device, index, minor, answer.migs); !migs) return migs.error();
  }
  return answer;
}

int run(const std::string& library) {
  auto api = load_api(library);
  if (!api) {
    std::fprintf(stderr, "nvml-query: %s\n", api.error().message.c_str());
    return kExitLoadFailed;
  }
  if (auto r = api->init(); r != kNvmlSuccess) {
    std::fprintf(stderr, "nvml-query: %s\n", nvml_error(*api, "nvmlInit_v2", r).message.c_str());
    return kExitNvmlError;
  }
  auto answer = query(*api);
  if (!answer) {
    api->shutdown();
    std::fprintf(stderr, "nvml-query: %s\n", answer.error().message.c_str());
    return kExitNvmlError;
  }
  std::string text = format_nvml_answer(*answer) + "\n";
  bool written = std::fputs(text.c_str(), stdout) >= 0;
  // stdout is closed before nvmlShutdown so that the reader has its answer (EOF) even
  // should shutdown block in the driver.
  written = std::fclose(stdout) == 0 && written;
  api->shutdown();
  if (!written) {
    std::fprintf(stderr, "nvml-query: writing the answer to stdout failed\n");
    return 1;
  }
  return 0;
}

}  // namespace

int nvml_query_main(const std::string& library) {
  try {
    return run(library);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "nvml-query: %s\n", e.what());
    return 1;
  }
}

}  // namespace gdw
