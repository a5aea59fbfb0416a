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

#include "core/desired_state.h"
#include "core/model.h"
#include "core/result.h"

namespace gdw {

enum class Mode { kEnforce, kObserve };
enum class CgroupVersion { kAuto, kV1, kV2 };
enum class CgroupDriver { kAuto, kCgroupfs, kSystemd };
enum class AllocationSource { kAuto, kCheckpoint, kPodResources };
enum class InvalidChecksumPolicy { kUse, kIgnore };
// When the probe's syscall hook (denied opens, exact v2 attach events, rule-write results)
// is attached. It slows every syscall on the node while attached. auto: on-drift when the
// kernel names rule writers without it (cap_capable tracepoint, >= 6.14), else always.
enum class SyscallHookPolicy { kAuto, kAlways, kOnDrift, kOff };
// Kubernetes Events on affected pods. auto: on when an API server is known.
enum class EventsPolicy { kAuto, kOn, kOff };

using Duration = std::chrono::milliseconds;

struct Config {
  Mode mode = Mode::kEnforce;

  struct Cgroup {
    std::string root = "/sys/fs/cgroup";
    std::string kubepods;  // empty: detect kubepods or kubepods.slice
    CgroupVersion version = CgroupVersion::kAuto;
    CgroupDriver driver = CgroupDriver::kAuto;
    bool operator==(const Cgroup&) const = default;
  } cgroup;

  struct Kubelet {
    // kubelet's --root-dir (k0s, microk8s and others move it). checkpoint,
    // pod_resources_socket and device_plugins_dir default to their places under it; a key
    // set explicitly in the file wins (parse_config derives the rest).
    std::string root_dir = "/var/lib/kubelet";
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
    // A stale verdict must hold at two checks (each against a fresh inventory) this far
    // apart before the remediation runs.
    Duration stale_confirm_after{300000};
    std::string unit = "kubelet.service";
    bool operator==(const Kubelet&) const = default;
  } kubelet;

  struct Runtime {
    std::vector<std::string> state_dirs = {
        "/run/containerd/io.containerd.runtime.v2.task/k8s.io",
        "/run/containers/storage/overlay-containers",
    };
    bool operator==(const Runtime&) const = default;
  } runtime;

  struct Devices {
    std::string dev_root = "/dev";
    std::string proc_root = "/proc";
    // Time-slicing with renameByDefault renames the resources to *.shared.
    std::vector<std::string> resources = {"nvidia.com/gpu", "nvidia.com/mig-*", "nvidia.com/gpu.shared",
                                          "nvidia.com/mig-*.shared"};
    // DRA drivers (globs on a claim's driver_name) whose claims are GPU allocations.
    std::vector<std::string> dra_drivers = {"gpu.nvidia.com", "gpu.amd.com", "gpu.intel.com"};
    std::vector<std::string> control = {"nvidiactl", "nvidia-uvm", "nvidia-uvm-tools", "nvidia-modeset"};
    std::string nvml_library = "libnvidia-ml.so.1";
    Duration nvml_timeout{10000};
    // Operator-provided MIG UUID → (GPU minor, GI, CI), used where NVML gives no answer.
    std::vector<MigDevice> mig_map;
    // GPUs a container without allocation reaches through NVIDIA_VISIBLE_DEVICES:
    // report (default) or restore (core/env_visible.h).
    EnvVisiblePolicy env_visible = EnvVisiblePolicy::kReport;
    bool operator==(const Devices&) const = default;
  } devices;

  // Container Device Interface spec files (JSON or YAML), for the CDI names of device
  // plugins' AllocResp and of DRA claims. A device defined in a later directory wins.
  struct Cdi {
    std::vector<std::string> spec_dirs = {"/etc/cdi", "/var/run/cdi"};
    bool operator==(const Cdi&) const = default;
  } cdi;

  struct Repair {
    // The fight-loop guard (RepairBudget): a token bucket per container, `burst` tokens,
    // refilled at `max_per_minute`. Repairs are delayed only once it is empty, which takes
    // burst / (rate - 20/s) of re-applies at `rate`:
    //   200/s (the fastest real re-applier we size for)  33 s   (5 s of it uses 900 tokens)
    //   100/s                                             75 s
    //   2000/s, 10000/s (a writer in a tight loop)       3 s, 0.6 s
    //   <= 20/s (CPUManager reconcile, 10 s period: 0.1/s; a systemd reload storm: one
    //   re-apply per unit per reload, dozens in all)     never
    // Only an endless fight empties it; it is then held to 20 repairs/s (a few ms of CPU a
    // second) and the container counts in gpu_devwatch_containers_throttled (alerted on).
    std::uint32_t burst = 6000;           // repairs of one container before the guard engages
    std::uint32_t max_per_minute = 1200;  // sustained repair rate of one container
    // Log lines about repairs, per container: the first `log_burst`, then one per
    // `log_interval` carrying the count of those not logged. Never delays a repair.
    std::uint32_t log_burst = 10;
    Duration log_interval{10000};
    Duration rejected_backoff{30000};    // after the kernel refuses a grant
    // Never act inside a runtime's own apply (core/apply_wait.h): a grant waits for the
    // revoking runtime to exit, its create to end, or (no writer named) the rule writes to
    // go quiet for `apply_quiet`; at most `apply_wait_limit` (0: never waits).
    Duration apply_wait_limit{1000};
    Duration apply_quiet{5};
    bool operator==(const Repair&) const = default;
  } repair;

  struct Daemon {
    Duration resync_interval{60000};
    // cgroup v2: how often device programs are re-queried (a link released by its holder's
    // exit makes no bpf() call the probe could see).
    Duration program_query_interval{10000};
    // The event loop thread's scheduler slice in microseconds (watch/loop_slice.h), so that
    // a repair's wake-up preempts the re-applier still writing; 0: the kernel's default.
    std::uint32_t event_loop_slice_us = 100;
    // 1-99: the event loop thread runs under SCHED_FIFO at that priority (watch/loop_slice.h):
    // its wake-ups no longer wait behind busy fair tasks; 0: it stays a fair task.
    std::uint32_t event_loop_fifo_priority = 0;
    // After a grant the event loop thread sleeps this long (plus the kernel's timer slack)
    // before it reports, once per loop turn: a task it preempted runs first
    // (service/cpu_handover.h); 0: it reports at once.
    std::uint32_t grant_handover_us = 30;
    bool operator==(const Daemon&) const = default;
  } daemon;

  struct Metrics {
    std::string listen = "0.0.0.0:9477";  // empty: no HTTP server
    // exporter-toolkit web config file (TLS, basic auth); empty: plain HTTP, no auth.
    std::string web_config;
    // /healthz answers 503 once the event loop has not turned for this long (systemd's
    // WatchdogSec, when set, takes its place).
    Duration health_stale_after{30000};
    bool operator==(const Metrics&) const = default;
  } metrics;

  struct Probe {
    bool enabled = true;
    SyscallHookPolicy syscall_hook = SyscallHookPolicy::kAuto;
    // on-drift: how long the hook stays attached after the last missing device is back.
    Duration syscall_hook_linger{30000};
    // cgroup v2: see each device program attach to a GPU container as the kernel installs
    // it (a program on every kmalloc of the node). false: a device program load anywhere
    // makes every GPU container's programs be read again, 1 ms to 1 s later.
    bool attach_hook = true;
    bool operator==(const Probe&) const = default;
  } probe;

  struct Systemd {
    std::string bus_address;  // empty: the system bus
    Duration timeout{2000};
    // Where systemd keeps runtime unit files and drop-ins, highest priority first: a
    // scope's DeviceAllow= is read there (exposure, node/exposure.h).
    std::vector<std::string> unit_dirs = {"/run/systemd/system.control", "/run/systemd/transient"};
    bool operator==(const Systemd&) const = default;
  } systemd;

  // The API server, for Kubernetes Events. Empty api_server: the in-cluster convention,
  // https://$KUBERNETES_SERVICE_HOST:$KUBERNETES_SERVICE_PORT.
  struct Kubernetes {
    std::string api_server;
    std::string token_file = "/var/run/secrets/kubernetes.io/serviceaccount/token";
    std::string ca_file = "/var/run/secrets/kubernetes.io/serviceaccount/ca.crt";
    bool operator==(const Kubernetes&) const = default;
  } kubernetes;

  struct Events {
    EventsPolicy enabled = EventsPolicy::kAuto;
    std::uint32_t pod_writes_per_minute = 4;  // API writes one pod's events may cost
    bool operator==(const Events&) const = default;
  } events;

  // Node conditions (node-problem-detector conventions) and the pod readiness gate
  // gpu-devwatch.io/devices-ready, written to the API server named by `kubernetes`.
  struct Conditions {
    EventsPolicy enabled = EventsPolicy::kAuto;  // auto: on when an API server is known
    // How long a GPU container may miss allocated devices before it counts.
    Duration grace{10000};
    Duration resync{300000};  // every condition re-asserted this often
    bool readiness_gate = true;  // list/watch this node's pods for the gate
    bool operator==(const Conditions&) const = default;
  } conditions;

  struct Log {
    std::string level = "info";
    bool operator==(const Log&) const = default;
  } log;

  // Reload compares the running configuration with the file section by section.
  bool operator==(const Config&) const = default;
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
