/* A stand-in for libnvidia-ml.so.1 with just the entry points `gpu-devwatch nvml-query`
 * uses, driven by the environment of the process that loads it:
 *
 *   FAKE_NVML_MODE     ok (default) | fail: nvmlInit_v2 returns DRIVER_NOT_LOADED
 *                      | hang: nvmlInit_v2 never returns (the seed incident)
 *   FAKE_NVML_DEVICES  entries separated by ';' or ',':
 *                        GPU-<uuid>:<minor>               a GPU
 *                        MIG-<uuid>@<minor>/<gi>/<ci>     a MIG device of the GPU with that minor
 *                      e.g. "GPU-aaa:0;MIG-bbb@0/1/0,MIG-ccc@0/2/0"
 *   FAKE_NVML_MIG      unsupported: nvmlDeviceGetMaxMigDeviceCount answers NOT_SUPPORTED
 *   FAKE_NVML_DEVICES_FILE, FAKE_NVML_MODE_FILE
 *                      the same, read from a file when nvmlInit_v2 runs (each
 *                      `gpu-devwatch nvml-query` is a new process): a test changes the
 *                      answer of a running daemon's next query, e.g. a MIG geometry change.
 *                      A file wins over the variable; newlines separate entries too.
 *
 * A GPU with MIG devices reports 7 MIG slots; slots past its MIG devices answer NOT_FOUND,
 * as empty slots do on real hardware. Return codes and buffer sizes follow NVIDIA's public
 * NVML documentation. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define FAKE_SUCCESS 0
#define FAKE_ERROR_UNINITIALIZED 1
#define FAKE_ERROR_INVALID_ARGUMENT 2
#define FAKE_ERROR_NOT_SUPPORTED 3
#define FAKE_ERROR_NOT_FOUND 6
#define FAKE_ERROR_INSUFFICIENT_SIZE 7
#define FAKE_ERROR_DRIVER_NOT_LOADED 9

#define FAKE_MAX_GPUS 16
#define FAKE_MAX_MIGS 64
#define FAKE_MIG_SLOTS 7
#define FAKE_UUID_LEN 96

struct fake_device {
  int is_mig;
  char uuid[FAKE_UUID_LEN];
  unsigned minor;        /* GPU: its minor; MIG: the parent GPU's minor */
  unsigned gpu_instance; /* MIG only */
  unsigned compute_instance;
};

typedef struct fake_device* nvmlDevice_t;

static struct fake_device gpus[FAKE_MAX_GPUS];
static unsigned gpu_count;
static struct fake_device migs[FAKE_MAX_MIGS];
static unsigned mig_count;
static int initialized;

static int copy_uuid(char* dst, const char* src, size_t len) {
  if (len == 0 || len >= FAKE_UUID_LEN) return -1;
  memcpy(dst, src, len);
  dst[len] = '\0';
  return 0;
}

/* One entry of FAKE_NVML_DEVICES; malformed entries are ignored, which a test sees as a
 * missing device. */
static void add_entry(const char* entry, size_t len) {
  char text[256];
  if (len == 0 || len >= sizeof text) return;
  memcpy(text, entry, len);
  text[len] = '\0';
  if (strncmp(text, "GPU-", 4) == 0) {
    char* colon = strrchr(text, ':');
    if (!colon || gpu_count >= FAKE_MAX_GPUS) return;
    struct fake_device* gpu = &gpus[gpu_count];
    if (copy_uuid(gpu->uuid, text, (size_t)(colon - text)) != 0) return;
    gpu->is_mig = 0;
    gpu->minor = (unsigned)strtoul(colon + 1, NULL, 10);
    ++gpu_count;
  } else if (strncmp(text, "MIG-", 4) == 0) {
    char* at = strrchr(text, '@');
    struct fake_device* mig = &migs[mig_count];
    if (!at || mig_count >= FAKE_MAX_MIGS) return;
    if (sscanf(at + 1, "%u/%u/%u", &mig->minor, &mig->gpu_instance, &mig->compute_instance) != 3) return;
    if (copy_uuid(mig->uuid, text, (size_t)(at - text)) != 0) return;
    mig->is_mig = 1;
    ++mig_count;
  }
}

/* The content of the file named by `variable` (at most 4 KiB), or NULL. */
static const char* file_setting(const char* variable, char* buf, size_t size) {
  const char* path = getenv(variable);
  if (!path) return NULL;
  FILE* f = fopen(path, "r");
  if (!f) return NULL;
  size_t n = fread(buf, 1, size - 1, f);
  fclose(f);
  buf[n] = '\0';
  return buf;
}

static void load_devices(void) {
  static char from_file[4096];
  const char* spec = file_setting("FAKE_NVML_DEVICES_FILE", from_file, sizeof from_file);
  if (!spec) spec = getenv("FAKE_NVML_DEVICES");
  gpu_count = mig_count = 0;
  if (!spec) return;
  while (*spec) {
    size_t len = strcspn(spec, ";,\n");
    add_entry(spec, len);
    spec += len;
    if (*spec) ++spec;
  }
}

static const char* mode(void) {
  static char from_file[64];
  const char* m = file_setting("FAKE_NVML_MODE_FILE", from_file, sizeof from_file);
  if (m) {
    from_file[strcspn(from_file, " \n")] = '\0';
    return from_file;
  }
  m = getenv("FAKE_NVML_MODE");
  return m ? m : "ok";
}

static int is_gpu(nvmlDevice_t d) {
  for (unsigned i = 0; i < gpu_count; ++i)
    if (d == &gpus[i]) return 1;
  return 0;
}

static int is_mig(nvmlDevice_t d) {
  for (unsigned i = 0; i < mig_count; ++i)
    if (d == &migs[i]) return 1;
  return 0;
}

/* The MIG devices of a GPU, in FAKE_NVML_DEVICES order. */
static nvmlDevice_t mig_of(nvmlDevice_t gpu, unsigned slot) {
  unsigned seen = 0;
  for (unsigned i = 0; i < mig_count; ++i) {
    if (migs[i].minor != gpu->minor) continue;
    if (seen++ == slot) return &migs[i];
  }
  return NULL;
}

int nvmlInit_v2(void) {
  if (strcmp(mode(), "hang") == 0)
    for (;;) pause();
  if (strcmp(mode(), "fail") == 0) return FAKE_ERROR_DRIVER_NOT_LOADED;
  load_devices();
  initialized = 1;
  return FAKE_SUCCESS;
}

int nvmlShutdown(void) {
  if (!initialized) return FAKE_ERROR_UNINITIALIZED;
  initialized = 0;
  return FAKE_SUCCESS;
}

const char* nvmlErrorString(int result) {
  switch (result) {
    case FAKE_SUCCESS: return "Success";
    case FAKE_ERROR_UNINITIALIZED: return "Uninitialized";
    case FAKE_ERROR_INVALID_ARGUMENT: return "Invalid Argument";
    case FAKE_ERROR_NOT_SUPPORTED: return "Not Supported";
    case FAKE_ERROR_NOT_FOUND: return "Not Found";
    case FAKE_ERROR_INSUFFICIENT_SIZE: return "Insufficient Size";
    case FAKE_ERROR_DRIVER_NOT_LOADED: return "Driver Not Loaded";
    default: return "Unknown Error";
  }
}

int nvmlSystemGetDriverVersion(char* version, unsigned length) {
  static const char kVersion[] = "550.54.15";
  if (!initialized) return FAKE_ERROR_UNINITIALIZED;
  if (!version) return FAKE_ERROR_INVALID_ARGUMENT;
  if (length < sizeof kVersion) return FAKE_ERROR_INSUFFICIENT_SIZE;
  memcpy(version, kVersion, sizeof kVersion);
  return FAKE_SUCCESS;
}

int nvmlDeviceGetCount_v2(unsigned* count) {
  if (!initialized) return FAKE_ERROR_UNINITIALIZED;
  if (!count) return FAKE_ERROR_INVALID_ARGUMENT;
  *count = gpu_count;
  return FAKE_SUCCESS;
}

int nvmlDeviceGetHandleByIndex_v2(unsigned index, nvmlDevice_t* device) {
  if (!initialized) return FAKE_ERROR_UNINITIALIZED;
  if (!device || index >= gpu_count) return FAKE_ERROR_INVALID_ARGUMENT;
  *device = &gpus[index];
  return FAKE_SUCCESS;
}

int nvmlDeviceGetUUID(nvmlDevice_t device, char* uuid, unsigned length) {
  if (!initialized) return FAKE_ERROR_UNINITIALIZED;
  if (!(is_gpu(device) || is_mig(device)) || !uuid) return FAKE_ERROR_INVALID_ARGUMENT;
  if (length < strlen(device->uuid) + 1) return FAKE_ERROR_INSUFFICIENT_SIZE;
  strcpy(uuid, device->uuid);
  return FAKE_SUCCESS;
}

int nvmlDeviceGetMinorNumber(nvmlDevice_t device, unsigned* minor) {
  if (!initialized) return FAKE_ERROR_UNINITIALIZED;
  if (!is_gpu(device) || !minor) return FAKE_ERROR_INVALID_ARGUMENT;
  *minor = device->minor;
  return FAKE_SUCCESS;
}

int nvmlDeviceGetMaxMigDeviceCount(nvmlDevice_t device, unsigned* count) {
  if (!initialized) return FAKE_ERROR_UNINITIALIZED;
  if (!is_gpu(device) || !count) return FAKE_ERROR_INVALID_ARGUMENT;
  const char* mig = getenv("FAKE_NVML_MIG");
  if (mig && strcmp(mig, "unsupported") == 0) return FAKE_ERROR_NOT_SUPPORTED;
  *count = mig_of(device, 0) ? FAKE_MIG_SLOTS : 0;
  return FAKE_SUCCESS;
}

int nvmlDeviceGetMigDeviceHandleByIndex(nvmlDevice_t device, unsigned index, nvmlDevice_t* mig) {
  if (!initialized) return FAKE_ERROR_UNINITIALIZED;
  if (!is_gpu(device) || !mig || index >= FAKE_MIG_SLOTS) return FAKE_ERROR_INVALID_ARGUMENT;
  nvmlDevice_t found = mig_of(device, index);
  if (!found) return FAKE_ERROR_NOT_FOUND;
  *mig = found;
  return FAKE_SUCCESS;
}

int nvmlDeviceGetGpuInstanceId(nvmlDevice_t device, unsigned* id) {
  if (!initialized) return FAKE_ERROR_UNINITIALIZED;
  if (!is_mig(device) || !id) return FAKE_ERROR_INVALID_ARGUMENT;
  *id = device->gpu_instance;
  return FAKE_SUCCESS;
}

int nvmlDeviceGetComputeInstanceId(nvmlDevice_t device, unsigned* id) {
  if (!initialized) return FAKE_ERROR_UNINITIALIZED;
  if (!is_mig(device) || !id) return FAKE_ERROR_INVALID_ARGUMENT;
  *id = device->compute_instance;
  return FAKE_SUCCESS;
}
