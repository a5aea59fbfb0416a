#include "metrics/metric_catalogue.h"

namespace gdw {
namespace {

using Id = MetricId;
using Series = MetricFamilySpec::Series;
using Type = MetricType;

// From 10 µs (the repair target is well under 1 ms) to 1 s.
const std::vector<double> kRepairBuckets = {
    0.00001, 0.000025, 0.00005, 0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.1, 1};
const std::vector<double> kResyncBuckets = {0.001, 0.005, 0.01, 0.025, 0.05, 0.1,
                                                                0.25,  0.5,   1,    2.5,   5};

// Every family gpu-devwatch exports. test/deploy/check_metric_names.py reads the names
// from these rows; the deploy rules and dashboard depend on them.
const std::vector<MetricFamilySpec> kFamilies = {
    {Id::kDrift, Type::kCounter, "gpu_devwatch_drift_total",
     "A device a container must have was found missing from its device cgroup.",
     {"namespace", "pod", "container", "device"}, Series::kOnUse},
    {Id::kRegrants, Type::kCounter, "gpu_devwatch_regrants_total",
     "Device grants written back, by result (success|error) and method (cgroupfs|bpf|systemd).",
     {"result", "method"}, Series::kOnUse},
    {Id::kRepairDuration, Type::kHistogram, "gpu_devwatch_repair_duration_seconds",
     "Time from the event that revealed missing devices to the grant written.",
     {}, Series::kAtStart, {}, &kRepairBuckets},
    {Id::kRepairsThrottled, Type::kCounter, "gpu_devwatch_repairs_throttled_total",
     "Repairs delayed because the container's devices were revoked faster than repair.max_per_minute.",
     {"namespace", "pod", "container"}, Series::kOnUse},
    {Id::kContainersWatched, Type::kGauge, "gpu_devwatch_containers_watched",
     "GPU containers whose device cgroups are watched.",
     {}, Series::kAtStart},
    {Id::kContainersMissingDevices, Type::kGauge, "gpu_devwatch_containers_missing_devices",
     "GPU containers missing at least one device right now.",
     {}, Series::kAtStart},
    {Id::kContainersUnidentified, Type::kGauge, "gpu_devwatch_containers_unidentified",
     "Containers in pods holding devices whose OCI bundle was not found (not checked, not guessed).",
     {}, Series::kAtStart},
    {Id::kContainersThrottled, Type::kGauge, "gpu_devwatch_containers_throttled",
     "GPU containers whose devices are revoked faster than repair.max_per_minute right now.",
     {}, Series::kAtStart},
    {Id::kCheckpointChecksumValid, Type::kGauge, "gpu_devwatch_checkpoint_checksum_valid",
     "1 when the kubelet checkpoint's checksum verifies, 0 when it does not.",
     {}, Series::kAtStart},
    {Id::kCheckpointLoaded, Type::kGauge, "gpu_devwatch_checkpoint_loaded",
     "1 when the last read of the kubelet checkpoint succeeded.",
     {}, Series::kAtStart},
    {Id::kBuildInfo, Type::kGauge, "gpu_devwatch_build_info",
     "Version and git revision of the running gpu-devwatch.",
     {"version", "revision"}, Series::kOnUse},
    {Id::kEventLoopErrors, Type::kCounter, "gpu_devwatch_event_loop_errors_total",
     "Errors in the daemon's event handlers, by source.",
     {"source"}, Series::kOnUse},
    {Id::kResyncs, Type::kCounter, "gpu_devwatch_resyncs_total",
     "Full re-reads of every container, by reason (startup|periodic|overflow|reload|signal).",
     {"reason"}, Series::kOnUse},
    {Id::kResyncDuration, Type::kHistogram, "gpu_devwatch_resync_duration_seconds",
     "Duration of a full resync.",
     {}, Series::kAtStart, {}, &kResyncBuckets},
    {Id::kInotifyOverflows, Type::kCounter, "gpu_devwatch_inotify_overflows_total",
     "inotify queue overflows (each triggers a full resync).",
     {}, Series::kAtStart},
    {Id::kConfigReloads, Type::kCounter, "gpu_devwatch_config_reloads_total",
     "Configuration reloads on SIGHUP, by result (success|error).",
     {"result"}, Series::kOnUse},
    {Id::kProbeLoaded, Type::kGauge, "gpu_devwatch_probe_loaded",
     "1 when the eBPF probe is loaded, 0 when the daemon runs on inotify alone.",
     {}, Series::kAtStart},
    {Id::kSyscallHookAttached, Type::kGauge, "gpu_devwatch_probe_syscall_hook_attached",
     "1 while the probe's syscall hook is attached (denied opens, exact v2 program events, rule-write "
     "results); it slows every syscall on the node.",
     {}, Series::kAtStart},
    {Id::kAttachHookAttached, Type::kGauge, "gpu_devwatch_probe_attach_hook_attached",
     "1 for the kind of the probe's attach hook attached (cgroup v2: device program attaches to GPU "
     "containers seen as they happen), the cheapest the kernel allows: lsm (lsm/bpf), fexit (the cgroup "
     "attach path), kmalloc (tp_btf/kmalloc); all 0: a program load makes every GPU container's programs be "
     "read again.",
     {"kind"}, Series::kAtStart, {"lsm", "fexit", "kmalloc"}},
    {Id::kCapabilityHookAttached, Type::kGauge, "gpu_devwatch_probe_capability_hook_attached",
     "1 while the probe's capability hook is attached (cgroup v1: rule writers named at their permission "
     "check; cgroup v2 without the attach hook: device program loads). It runs on every capability check "
     "of the node, so it is attached only where the device policy needs it.",
     {}, Series::kAtStart},
    {Id::kWritePathHookAttached, Type::kGauge, "gpu_devwatch_probe_write_path_hook_attached",
     "1 while the probe sees cgroup v1 rule writes on the devices controller's write path "
     "(fexit/devcgroup_access_write: kernels before 6.14 that allow BPF trampolines); nothing else of the "
     "node passes there.",
     {}, Series::kAtStart},
    {Id::kRuleWritersDegraded, Type::kGauge, "gpu_devwatch_probe_rule_writers_degraded",
     "1 on a cgroup v1 node whose kernel lets the probe see rule writes neither at the permission check "
     "(cap_capable, 6.14+) nor on the write path (fexit): their writers are named only while the syscall "
     "hook is attached (a GPU container missing devices), not for the write that revoked.",
     {}, Series::kAtStart},
    {Id::kPodResourcesCalls, Type::kCounter, "gpu_devwatch_pod_resources_calls_total",
     "Calls to kubelet's PodResources List, by result (ok, socket-absent, deadline-exceeded, "
     "resource-exhausted, unavailable, other).",
     {"result"}, Series::kOnUse},
    {Id::kPodResourcesUp, Type::kGauge, "gpu_devwatch_pod_resources_up",
     "1 when the last PodResources List call succeeded.",
     {}, Series::kOnUse},
    {Id::kPodResourcesLatency, Type::kGauge, "gpu_devwatch_pod_resources_latency_seconds",
     "Duration of the last PodResources List call (until its answer or failure).",
     {}, Series::kOnUse},
    {Id::kAllocationDisagreements, Type::kGauge, "gpu_devwatch_allocation_disagreements",
     "Containers whose devices the checkpoint and the PodResources API report differently.",
     {}, Series::kAtStart},
    {Id::kAmbiguousPodIdentities, Type::kGauge, "gpu_devwatch_ambiguous_pod_identities",
     "Pod names (namespace/name) held by more than one live pod UID: PodResources entries for them are"
     " not used (checkpoint entries, keyed by UID, are).",
     {}, Series::kAtStart},
    {Id::kIdentityConflicts, Type::kGauge, "gpu_devwatch_identity_conflicts",
     "Containers whose OCI bundle contradicts their cgroup (pod UID, runtime, container ID): the "
     "bundle is not used.",
     {}, Series::kAtStart},
    {Id::kCdiSpecErrors, Type::kGauge, "gpu_devwatch_cdi_spec_errors",
     "CDI spec files in cdi.spec_dirs that could not be read or parsed: their devices are not defined.",
     {}, Series::kAtStart},
    {Id::kCdiUnresolvedDevices, Type::kGauge, "gpu_devwatch_cdi_unresolved_devices",
     "CDI device names allocated to running GPU containers (AllocResp, DRA claims) that no CDI spec "
     "defines: nothing is granted for them.",
     {}, Series::kAtStart},
    {Id::kDevicePrograms, Type::kGauge, "gpu_devwatch_device_programs",
     "cgroup v2: device programs attached to watched GPU containers, by owner (ours, systemd, "
     "runtime).",
     {"owner"}, Series::kOnUse},
    {Id::kDeviceProgramsReplaced, Type::kCounter, "gpu_devwatch_device_programs_replaced_total",
     "cgroup v2: device programs that repairs replaced or detached.",
     {}, Series::kAtStart},
    {Id::kDeviceProgramsLoaded, Type::kCounter, "gpu_devwatch_device_programs_loaded_total",
     "cgroup v2: wrapper programs the daemon loaded, a verifier run each: while a repair waited "
     "(when=\"repair\"), or ahead of repairs: while a runtime applied, or after a repair (when=\"ahead\").",
     {"when"}, Series::kAtStart, {"repair", "ahead"}},
    {Id::kLooksAhead, Type::kCounter, "gpu_devwatch_looks_ahead_total",
     "cgroup v2, with the attach hook: device program loads by a process inside a GPU container, "
     "which had the daemon look at that container before the attach that may follow (looked), or "
     "not: the daemon ran on the loader's CPU (same_cpu), or had looked ahead less than 10 ms "
     "before (interval).",
     {"outcome"}, Series::kAtStart, {"looked", "same_cpu", "interval"}},
    {Id::kDeviceProgramStaleSwaps, Type::kCounter, "gpu_devwatch_device_program_stale_swaps_total",
     "cgroup v2 (Linux 6.17+): swaps and detaches of device programs the kernel refused because the "
     "cgroup's programs changed after the query they were decided on (ESTALE); each was decided again "
     "at once on a fresh query.",
     {}, Series::kAtStart},
    {Id::kDeviceProgramSwapRevisions, Type::kGauge, "gpu_devwatch_device_program_swap_revisions",
     "cgroup v2: 1 when repairs swap device programs with the revision of the query they were decided on "
     "(expected_revision, Linux 6.17+), 0 when the kernel keeps no revisions (the swap names the program it "
     "replaces, BPF_F_REPLACE).",
     {}, Series::kOnUse},
    {Id::kApplyWaits, Type::kCounter, "gpu_devwatch_apply_waits_total",
     "Checks that waited for a runtime's own apply to end before granting, by what ended the wait: "
     "the writer's exit (writer_exit), the runtime's create (create), rule writes going quiet "
     "without a named writer (quiet), or repair.apply_wait_limit (limit).",
     {"until"}, Series::kAtStart, {"writer_exit", "create", "quiet", "limit"}},
    {Id::kCheckpointStale, Type::kGauge, "gpu_devwatch_checkpoint_stale",
     "1 when the kubelet checkpoint names devices this host does not have or another boot's BootID.",
     {}, Series::kAtStart},
    {Id::kCheckpointUnknownDevices, Type::kGauge, "gpu_devwatch_checkpoint_unknown_devices",
     "Device IDs in the kubelet checkpoint that are not on this host.",
     {}, Series::kAtStart},
    {Id::kRemediationHeld, Type::kGauge, "gpu_devwatch_checkpoint_remediation_held",
     "1 for why a stale checkpoint is not remediated now: inventory-unconfirmed (no fresh inventory, "
     "NVML asked again), awaiting-confirmation (kubelet.stale_confirm_after), devices-in-use (running "
     "containers hold devices it names).",
     {"reason"}, Series::kAtStart, {"inventory-unconfirmed", "awaiting-confirmation", "devices-in-use"}},
    {Id::kRemediations, Type::kCounter, "gpu_devwatch_checkpoint_remediations_total",
     "Stale checkpoints moved aside and kubelet restarted (kubelet.remediate_stale_checkpoint), by "
     "result.",
     {"result"}, Series::kOnUse},
    {Id::kDevicePluginUp, Type::kGauge, "gpu_devwatch_device_plugin_up",
     "1 when the device plugin on this socket answered GetDevicePluginOptions within the deadline.",
     {"socket"}, Series::kOnUse},
    {Id::kDevicePluginLatency, Type::kGauge, "gpu_devwatch_device_plugin_probe_latency_seconds",
     "Duration of the last GetDevicePluginOptions probe of the plugin on this socket.",
     {"socket"}, Series::kOnUse},
    {Id::kCheckpointLastWrite, Type::kGauge, "gpu_devwatch_checkpoint_last_write_timestamp_seconds",
     "When kubelet last wrote its device checkpoint (it does on every allocation).",
     {}, Series::kAtStart},
    {Id::kNewestContainerStart, Type::kGauge, "gpu_devwatch_newest_container_start_timestamp_seconds",
     "When the newest running container's cgroup was created.",
     {}, Series::kAtStart},
    {Id::kCheckpointLag, Type::kGauge, "gpu_devwatch_checkpoint_lag_seconds",
     "How much older the newest allocation in the checkpoint is than the newest running container.",
     {}, Series::kAtStart},
    {Id::kRevocations, Type::kCounter, "gpu_devwatch_revocations_total",
     "Writes that revoked a GPU container's devices, by recognised writer.",
     {"writer"}, Series::kOnUse},
    {Id::kDeniedOpens, Type::kCounter, "gpu_devwatch_denied_opens_total",
     "Opens that failed with EPERM inside a GPU container: device is the container's GPU node opened "
     "by its registered path, or other (anything else).",
     {"namespace", "pod", "container", "device"}, Series::kOnUse},
    {Id::kRingBufferDrops, Type::kCounter, "gpu_devwatch_probe_ring_buffer_drops_total",
     "Probe events lost because the ring buffer was full.",
     {}, Series::kAtStart},
    {Id::kProbeRecordDelay, Type::kHistogram, "gpu_devwatch_probe_record_delay_seconds",
     "Time from the probe's record of a device rule write or device program change (its kernel "
     "timestamp) to the daemon reading it: the wake-up part of a repair's reaction.",
     {}, Series::kAtStart, {}, &kRepairBuckets},
    {Id::kEventsSent, Type::kCounter, "gpu_devwatch_events_sent_total",
     "Kubernetes Event writes (POST or PATCH) the API server accepted.",
     {}, Series::kAtStart},
    {Id::kEventsDropped, Type::kCounter, "gpu_devwatch_events_dropped_total",
     "Kubernetes Event writes dropped, by reason (queue_full, unreachable, rejected, credentials, "
     "invalid_object).",
     {"reason"}, Series::kAtStart, {"queue_full", "unreachable", "rejected", "credentials", "invalid_object"}},
    {Id::kExposedDevices, Type::kGauge, "gpu_devwatch_exposed_devices",
     "Devices a GPU container must have that the next re-apply of its device policy would revoke, by "
     "re-applier: runtime (its OCI spec's device rules do not allow them) or systemd (on the systemd "
     "driver, its scope's DeviceAllow= lacks them: daemon-reload).",
     {"namespace", "pod", "container", "reapplier"}, Series::kOnUse},
    {Id::kContainersExposed, Type::kGauge, "gpu_devwatch_containers_exposed",
     "GPU containers with at least one exposed device (gpu_devwatch_exposed_devices > 0).",
     {}, Series::kAtStart},
    {Id::kEnvVisibleContainers, Type::kGauge, "gpu_devwatch_env_visible_containers",
     "Containers without a GPU allocation whose NVIDIA_VISIBLE_DEVICES names GPUs of this node "
     "(restored only with devices.env_visible: restore).",
     {}, Series::kAtStart},
    {Id::kNodeCondition, Type::kGauge, "gpu_devwatch_node_condition",
     "1 while the node condition is True (the problem is present), as last judged: GPUDeviceAccessDegraded, "
     "GPUAllocationRecordStale, GPUDevicePluginUnresponsive.",
     {"condition"}, Series::kOnUse},
    {Id::kStatusWrites, Type::kCounter, "gpu_devwatch_status_writes_total",
     "Node condition and pod readiness gate writes (PATCH .../status), by object (node, pod) and result "
     "(sent, queue_full, unreachable, rejected, credentials); failed writes are retried with back-off.",
     {"object", "result"}, Series::kOnUse},
    {Id::kReadinessGatePods, Type::kGauge, "gpu_devwatch_readiness_gate_pods",
     "Pods on this node that declare the readiness gate gpu-devwatch.io/devices-ready.",
     {}, Series::kAtStart},
    {Id::kPodWatchUp, Type::kGauge, "gpu_devwatch_pod_watch_up",
     "1 while this node's pods are listed and watched (for the readiness gate), 0 while that fails.",
     {}, Series::kOnUse},
    {Id::kPodWatchLists, Type::kCounter, "gpu_devwatch_pod_watch_lists_total",
     "Complete lists of this node's pods: at start, after 410 Gone and after the watch failed.",
     {}, Series::kAtStart},
    {Id::kPodWatchSkipped, Type::kCounter, "gpu_devwatch_pod_watch_skipped_total",
     "Pods or watch events not used: larger than the bounds, malformed, or beyond the gated pods kept.",
     {}, Series::kAtStart},
};

}  // namespace

std::span<const MetricFamilySpec> metric_families() { return kFamilies; }

}  // namespace gdw
