// gpu-devwatch configuration: every key has a default, so a node needs no file.
// config/gpu-devwatch.yaml documents each key; parse_config() validates every one and
// reports errors as "<file>:<line>: <key>: <problem>".
#pragma once

#include <chrono>
#include <cstdint>
#include <map>
#include <string>
#include <string_view>
#include <vector>

#include "core/model.h"
#include "core/result.h"

namespace gdw {

enum class Mode { kEnforce, kObserve };
enum class CgroupVersion { kAuto, kV1, kV2 };
enum class CgroupDriver { kAuto, kCgroupfs, kSystemd };
enum class AllocationSource { kAuto, kCheckpoint, kPodResources };
enum class InvalidChecksumPolicy { kUse, kIgnore };
// The devices runc allows beyond the spec on cgroup v2 (tun was dropped in runc 1.2).
enum class BuiltinDevices { kRunc1_1, kRunc1_2 };
// When the probe's syscall hook (denied opens, exact v2 attach events, rule-write results)
// is attached. It slows every syscall on the node while attached. auto: on-drift when the
// kernel names rule writers without it (cap_capable tracepoint, >= 6.14), else always.
enum class SyscallHookPolicy { kAuto, kAlways, kOnDrift, kOff };

using Duration = std::chrono::milliseconds;

struct Config {
  Mode mode = Mode::kEnforce;

  struct Cgroup {
    std::string root = "/sys/fs/cgroup";
    std::string kubepods;  // empty: detect kubepods or kubepods.slice
    CgroupVersion version = CgroupVersion::kAuto;
    CgroupDriver driver = CgroupDriver::kAuto;
  } cgroup;

  struct Kubelet {
    std::string checkpoint = "/var/lib/kubelet/device-plugins/kubelet_internal_checkpoint";
    InvalidChecksumPolicy on_invalid_checksum = InvalidChecksumPolicy::kUse;
    AllocationSource source = AllocationSource::kAuto;
    std::string pod_resources_socket = "/var/lib/kubelet/pod-resources/kubelet.sock";
    Duration pod_resources_timeout{2000};
    Duration pod_resources_interval{10000};
    std::string device_plugins_dir = "/var/lib/kubelet/device-plugins";
    Duration plugin_probe_interval{30000};
    Duration plugin_probe_timeout{2000};
    bool remediate_stale_checkpoint = false;
    std::string unit = "kubelet.service";
  } kubelet;

  struct Runtime {
    BuiltinDevices builtin_devices = BuiltinDevices::kRunc1_1;
    std::vector<std::string> state_dirs = {
        "/run/containerd/io.containerd.runtime.v2.task/k8s.io",
        "/run/containers/storage/overlay-containers",
    };
  } runtime;

  struct Devices {
    std::string dev_root = "/dev";
    std::string proc_root = "/proc";
    std::vector<std::string> resources = {"nvidia.com/gpu", "nvidia.com/mig-*"};
    std::vector<std::string> control = {"nvidiactl", "nvidia-uvm", "nvidia-uvm-tools", "nvidia-modeset"};
    std::string nvml_library = "libnvidia-ml.so.1";
    Duration nvml_timeout{10000};
    // Operator-provided MIG UUID → (GPU minor, GI, CI), used where NVML gives no answer.
    std::vector<MigDevice> mig_map;
  } devices;

  struct Repair {
    std::uint32_t burst = 10;            // back-to-back repairs of one container
    std::uint32_t max_per_minute = 120;  // sustained repair rate of one container
    Duration rejected_backoff{30000};    // after the kernel refuses a grant
  } repair;

  struct Daemon {
    Duration resync_interval{60000};
    // cgroup v2: how often device programs are re-queried (a link released by its holder's
    // exit makes no bpf() call the probe could see).
    Duration program_query_interval{10000};
  } daemon;

  struct Metrics {
    std::string listen = "0.0.0.0:9477";  // empty: no HTTP server
  } metrics;

  struct Probe {
    bool enabled = true;
    SyscallHookPolicy syscall_hook = SyscallHookPolicy::kAuto;
    // on-drift: how long the hook stays attached after the last missing device is back.
    Duration syscall_hook_linger{30000};
  } probe;

  struct Systemd {
    std::string bus_address;  // empty: the system bus
    Duration timeout{2000};
  } systemd;

  struct Log {
    std::string level = "info";
  } log;
};

// Parses YAML text. `file_name` only labels errors. An empty document gives the defaults.
Result<Config> parse_config(std::string_view yaml_text, const std::string& file_name);

// Every key parse_config() accepts, dotted ("cgroup.root"), for documentation checks.
std::vector<std::string> config_keys();

std::string to_string(Mode m);
std::string to_string(CgroupVersion v);
std::string to_string(CgroupDriver d);
std::string to_string(AllocationSource s);
std::string to_string(SyscallHookPolicy p);
std::string format_duration(Duration d);
Result<Duration> parse_duration(std::string_view text);

}  // namespace gdw
