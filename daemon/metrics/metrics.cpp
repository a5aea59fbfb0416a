#include "metrics/metrics.h"

#include <prometheus/counter.h>
#include <prometheus/family.h>
#include <prometheus/gauge.h>
#include <prometheus/histogram.h>
#include <prometheus/registry.h>
#include <prometheus/text_serializer.h>

#include <stdexcept>

#include "build_info.h"

namespace gdw {

enum class MetricId : std::uint8_t {
  kDrift, kRegrants, kRepairDuration, kRepairsThrottled, kContainersWatched, kContainersMissingDevices,
  kContainersUnidentified, kContainersThrottled, kCheckpointChecksumValid, kCheckpointLoaded, kBuildInfo,
  kEventLoopErrors, kResyncs, kResyncDuration, kInotifyOverflows, kConfigReloads, kProbeLoaded,
  kSyscallHookAttached, kPodResourcesCalls, kPodResourcesUp, kPodResourcesLatency,
  kAllocationDisagreements, kAmbiguousPodIdentities, kIdentityConflicts, kCdiSpecErrors,
  kCdiUnresolvedDevices, kDevicePrograms, kDeviceProgramsReplaced, kCheckpointStale,
  kCheckpointUnknownDevices, kRemediationHeld, kRemediations, kDevicePluginUp, kDevicePluginLatency,
  kCheckpointLastWrite, kNewestContainerStart, kCheckpointLag, kRevocations, kDeniedOpens,
  kRingBufferDrops, kEventsSent, kEventsDropped, kExposedDevices, kContainersExposed,
  kEnvVisibleContainers, kNodeCondition, kStatusWrites, kReadinessGatePods, kPodWatchUp, kPodWatchLists,
  kPodWatchSkipped, kCount,
};

namespace {

using Id = MetricId;
using Series = MetricFamilySpec::Series;
using Type = MetricType;

// From 10 µs (the repair target is well under 1 ms) to 1 s.
const prometheus::Histogram::BucketBoundaries kRepairBuckets = {
    0.00001, 0.000025, 0.00005, 0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.1, 1};
const prometheus::Histogram::BucketBoundaries kResyncBuckets = {0.001, 0.005, 0.01, 0.025, 0.05, 0.1,
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
    {Id::kEventsSent, Type::kCounter, "gpu_devwatch_events_sent_total",
     "Kubernetes Event writes (POST or PATCH) the API server accepted.",
     {}, Series::kAtStart},
    {Id::kEventsDropped, Type::kCounter, "gpu_devwatch_events_dropped_total",
     "Kubernetes Event writes dropped, by reason (queue_full, unreachable, rejected, credentials, "
     "invalid_object).",
     {"reason"}, Series::kAtStart, {"queue_full", "unreachable", "rejected", "credentials", "invalid_object"}},
    {Id::kExposedDevices, Type::kGauge, "gpu_devwatch_exposed_devices",
     "Devices a GPU container must have that the next re-apply of its device policy would revoke: its "
     "OCI spec's device rules do not allow them (runtime re-apply), or, on the systemd driver, its "
     "scope's DeviceAllow= lacks them (daemon-reload).",
     {"namespace", "pod", "container"}, Series::kOnUse},
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

std::map<std::string, std::string> labels_of(const ContainerLabels& c) {
  return {{"namespace", c.pod_namespace}, {"pod", c.pod}, {"container", c.container}};
}

// A method asked its family for what its row does not make: a programming error.
template <class T>
T& must(T* p, Id id, const char* what) {
  if (!p) throw std::logic_error("metric family " + std::to_string(std::size_t(id)) + " has no " + what);
  return *p;
}

}  // namespace

std::span<const MetricFamilySpec> metric_families() { return kFamilies; }

Metrics::Metrics() : registry_(std::make_shared<prometheus::Registry>()), families_(std::size_t(Id::kCount)) {
  for (const auto& spec : kFamilies) register_family(spec);
  for (std::size_t i = 0; i < families_.size(); ++i) {
    const Registered& f = families_[i];
    if (!f.counters && !f.gauges && !f.histograms)
      throw std::logic_error("metric family " + std::to_string(i) + " has no row in the table");
  }
  gauges(Id::kBuildInfo).Add({{"version", GDW_VERSION}, {"revision", GDW_GIT_REVISION}}).Set(1);
}

void Metrics::register_family(const MetricFamilySpec& spec) {
  Registered& f = families_.at(std::size_t(spec.id));
  if (f.counters || f.gauges || f.histograms) throw std::logic_error(std::string(spec.name) + ": its Id has two rows");
  const std::string name(spec.name), help(spec.help);
  switch (spec.type) {
    case Type::kCounter:
      f.counters = &prometheus::BuildCounter().Name(name).Help(help).Register(*registry_);
      break;
    case Type::kGauge:
      f.gauges = &prometheus::BuildGauge().Name(name).Help(help).Register(*registry_);
      break;
    case Type::kHistogram:
      f.histograms = &prometheus::BuildHistogram().Name(name).Help(help).Register(*registry_);
      break;
  }
  if (spec.series != MetricFamilySpec::Series::kAtStart) return;
  if (spec.values.empty()) {
    if (f.counters) f.counter = &f.counters->Add({});
    if (f.gauges) f.gauge = &f.gauges->Add({});
    if (f.histograms) f.histogram = &f.histograms->Add({}, *spec.buckets);
    return;
  }
  for (auto value : spec.values) {
    const prometheus::Labels labels{{std::string(spec.labels.at(0)), std::string(value)}};
    if (f.counters) f.counters->Add(labels);
    if (f.gauges) f.gauges->Add(labels);
    if (f.histograms) f.histograms->Add(labels, *spec.buckets);
  }
}

const Metrics::Registered& Metrics::family(Id id) const { return families_[std::size_t(id)]; }

prometheus::Family<prometheus::Counter>& Metrics::counters(Id id) const {
  return must(family(id).counters, id, "counters");
}
prometheus::Family<prometheus::Gauge>& Metrics::gauges(Id id) const { return must(family(id).gauges, id, "gauges"); }
prometheus::Counter& Metrics::counter(Id id) const { return must(family(id).counter, id, "unlabeled counter"); }
prometheus::Gauge& Metrics::gauge(Id id) const { return must(family(id).gauge, id, "unlabeled gauge"); }
prometheus::Histogram& Metrics::histogram(Id id) const { return must(family(id).histogram, id, "unlabeled histogram"); }

Metrics::~Metrics() = default;

Status Metrics::serve(const std::string& listen, HttpHandler healthz, MetricsAccess access) {
  listen_ = listen;
  if (!listen_.empty() && listen_[0] == ':') listen_ = "0.0.0.0" + listen_;
  healthz_ = std::move(healthz);
  access_ = std::move(access);
  return start_http(access_);
}

Status Metrics::reserve(MetricsAccess access) {
  http_.reset();  // the port is free again for the new server
  if (auto s = start_http(access); !s) {
    if (auto again = start_http(access_); !again)
      return Error{s.error().message + "; with the previous web config: " + again.error().message};
    return s;
  }
  access_ = std::move(access);
  return {};
}

Status Metrics::start_http(const MetricsAccess& access) {
  // The registry is thread-safe; nothing else of this object is touched off the loop.
  std::map<std::string, HttpHandler> routes{
      {"/metrics", [registry = registry_] {
         return HttpResponse{200, "text/plain; version=0.0.4; charset=utf-8",
                             prometheus::TextSerializer().Serialize(registry->Collect())};
       }},
      {"/healthz", healthz_}};
  HttpServerOptions options;
  options.tls = access.tls;
  options.basic_auth = access.basic_auth;
  options.unauthenticated_paths = {"/healthz"};
  auto server = HttpServer::start(listen_, std::move(routes), options);
  if (!server) return Error{"serving metrics: " + server.error().message};
  http_ = std::move(*server);
  return {};
}

std::string Metrics::render() const { return prometheus::TextSerializer().Serialize(registry_->Collect()); }

std::size_t Metrics::LabelsHash::operator()(const ContainerLabels& c) const {
  const std::hash<std::string> h;
  return h(c.pod_namespace) ^ (h(c.pod) * 31) ^ (h(c.container) * 131);
}

prometheus::Counter& Metrics::container_counter(prometheus::Family<prometheus::Counter>& family,
                                                const ContainerLabels& c, std::string_view extra_name,
                                                std::string_view extra_value) {
  if (!last_container_ || last_container_->first != c) last_container_ = &*by_container_.try_emplace(c).first;
  auto& series = last_container_->second;
  for (const auto& s : series)
    if (s.family == &family && s.extra_name == extra_name && s.extra_value == extra_value) return *s.counter;
  auto labels = labels_of(c);
  if (!extra_name.empty()) labels.emplace(extra_name, extra_value);
  prometheus::Counter& counter = family.Add(labels);
  series.push_back(Series{&family, &counter, std::string(extra_name), std::string(extra_value)});
  return counter;
}

void Metrics::drift(const ContainerLabels& c, const std::string& device) {
  container_counter(counters(Id::kDrift), c, "device", device).Increment();
}

void Metrics::regrant(bool success, const std::string& method, std::size_t count) {
  prometheus::Counter*& series = regrant_series_[{success, method}];
  if (!series) series = &counters(Id::kRegrants).Add({{"result", success ? "success" : "error"}, {"method", method}});
  series->Increment(static_cast<double>(count));
}

void Metrics::repair_duration(double seconds) { histogram(Id::kRepairDuration).Observe(seconds); }
void Metrics::throttled(const ContainerLabels& c) { container_counter(counters(Id::kRepairsThrottled), c).Increment(); }
void Metrics::set_containers_watched(std::size_t n) { gauge(Id::kContainersWatched).Set(static_cast<double>(n)); }
void Metrics::set_containers_missing_devices(std::size_t n) { gauge(Id::kContainersMissingDevices).Set(static_cast<double>(n)); }
void Metrics::set_containers_unidentified(std::size_t n) { gauge(Id::kContainersUnidentified).Set(static_cast<double>(n)); }
void Metrics::set_containers_throttled(std::size_t n) { gauge(Id::kContainersThrottled).Set(static_cast<double>(n)); }

void Metrics::set_container_exposure(const ContainerLabels& c, std::optional<std::size_t> exposed_devices,
                                     bool env_visible) {
  if (exposed_devices) {
    gauges(Id::kExposedDevices).Add(labels_of(c)).Set(static_cast<double>(*exposed_devices));
    exposed_[c] = *exposed_devices;
  } else if (exposed_.erase(c)) {
    gauges(Id::kExposedDevices).Remove(&gauges(Id::kExposedDevices).Add(labels_of(c)));
  }
  if (env_visible) {
    env_visible_.insert(c);
  } else {
    env_visible_.erase(c);
  }
  update_exposure_totals();
}

void Metrics::update_exposure_totals() {
  std::size_t exposed = 0;
  for (const auto& [c, n] : exposed_) exposed += n > 0;
  gauge(Id::kContainersExposed).Set(static_cast<double>(exposed));
  gauge(Id::kEnvVisibleContainers).Set(static_cast<double>(env_visible_.size()));
}

void Metrics::forget(const ContainerLabels& c) {
  set_container_exposure(c, std::nullopt, false);
  auto it = by_container_.find(c);
  if (it == by_container_.end()) return;
  for (const auto& s : it->second) s.family->Remove(s.counter);
  if (&*it == last_container_) last_container_ = nullptr;
  by_container_.erase(it);
}

void Metrics::set_checkpoint_checksum_valid(bool valid) { gauge(Id::kCheckpointChecksumValid).Set(valid ? 1 : 0); }
void Metrics::set_checkpoint_loaded(bool ok) { gauge(Id::kCheckpointLoaded).Set(ok ? 1 : 0); }
void Metrics::event_loop_error(const std::string& source) { counters(Id::kEventLoopErrors).Add({{"source", source}}).Increment(); }

void Metrics::resync(const std::string& reason, double seconds) {
  counters(Id::kResyncs).Add({{"reason", reason}}).Increment();
  histogram(Id::kResyncDuration).Observe(seconds);
}

void Metrics::inotify_overflow() { counter(Id::kInotifyOverflows).Increment(); }
void Metrics::config_reload(bool success) {
  counters(Id::kConfigReloads).Add({{"result", success ? "success" : "error"}}).Increment();
}
void Metrics::pod_resources_call(const std::string& result, double latency_seconds) {
  counters(Id::kPodResourcesCalls).Add({{"result", result}}).Increment();
  gauges(Id::kPodResourcesUp).Add({}).Set(result == "ok" ? 1 : 0);
  gauges(Id::kPodResourcesLatency).Add({}).Set(latency_seconds);
}
void Metrics::set_allocation_disagreements(std::size_t n) { gauge(Id::kAllocationDisagreements).Set(static_cast<double>(n)); }
void Metrics::set_ambiguous_pod_identities(std::size_t n) { gauge(Id::kAmbiguousPodIdentities).Set(static_cast<double>(n)); }
void Metrics::set_identity_conflicts(std::size_t n) { gauge(Id::kIdentityConflicts).Set(static_cast<double>(n)); }
void Metrics::set_cdi_spec_errors(std::size_t n) { gauge(Id::kCdiSpecErrors).Set(static_cast<double>(n)); }
void Metrics::set_cdi_unresolved_devices(std::size_t n) { gauge(Id::kCdiUnresolvedDevices).Set(static_cast<double>(n)); }
void Metrics::set_device_programs(const std::string& owner, std::size_t n) {
  gauges(Id::kDevicePrograms).Add({{"owner", owner}}).Set(static_cast<double>(n));
}
void Metrics::programs_replaced(std::size_t n) { counter(Id::kDeviceProgramsReplaced).Increment(static_cast<double>(n)); }

void Metrics::set_checkpoint_stale(bool stale, std::size_t unknown_devices) {
  gauge(Id::kCheckpointStale).Set(stale ? 1 : 0);
  gauge(Id::kCheckpointUnknownDevices).Set(static_cast<double>(unknown_devices));
}
void Metrics::set_checkpoint_remediation_held(const std::string& reason) {
  for (const char* r : {"inventory-unconfirmed", "awaiting-confirmation", "devices-in-use"})
    gauges(Id::kRemediationHeld).Add({{"reason", r}}).Set(reason == r ? 1 : 0);
}

void Metrics::checkpoint_remediation(bool success) {
  counters(Id::kRemediations).Add({{"result", success ? "success" : "error"}}).Increment();
}
void Metrics::set_device_plugin(const std::string& socket, bool up, double latency_seconds) {
  gauges(Id::kDevicePluginUp).Add({{"socket", socket}}).Set(up ? 1 : 0);
  gauges(Id::kDevicePluginLatency).Add({{"socket", socket}}).Set(latency_seconds);
}
void Metrics::forget_device_plugin(const std::string& socket) {
  gauges(Id::kDevicePluginUp).Remove(&gauges(Id::kDevicePluginUp).Add({{"socket", socket}}));
  gauges(Id::kDevicePluginLatency).Remove(&gauges(Id::kDevicePluginLatency).Add({{"socket", socket}}));
}
void Metrics::set_checkpoint_last_write(double unix_seconds) {
  checkpoint_last_write_seconds_ = unix_seconds;
  gauge(Id::kCheckpointLastWrite).Set(unix_seconds);
  update_checkpoint_lag();
}
void Metrics::set_newest_container_start(double unix_seconds) {
  newest_container_start_seconds_ = unix_seconds;
  gauge(Id::kNewestContainerStart).Set(unix_seconds);
  update_checkpoint_lag();
}
void Metrics::update_checkpoint_lag() {
  const double lag = newest_container_start_seconds_ - checkpoint_last_write_seconds_;
  gauge(Id::kCheckpointLag).Set(checkpoint_last_write_seconds_ > 0 && lag > 0 ? lag : 0);
}

void Metrics::set_probe_loaded(bool loaded) { gauge(Id::kProbeLoaded).Set(loaded ? 1 : 0); }
void Metrics::set_syscall_hook_attached(bool attached) { gauge(Id::kSyscallHookAttached).Set(attached ? 1 : 0); }
void Metrics::revocation(const std::string& writer) {
  auto it = revocation_series_.find(writer);
  if (it == revocation_series_.end())
    it = revocation_series_.emplace(writer, &counters(Id::kRevocations).Add({{"writer", writer}})).first;
  it->second->Increment();
}
void Metrics::denied_open(const ContainerLabels& c, const std::string& device, std::uint64_t count) {
  container_counter(counters(Id::kDeniedOpens), c, "device", device).Increment(static_cast<double>(count));
}
void Metrics::event_sent() { counter(Id::kEventsSent).Increment(); }

void Metrics::event_dropped(const std::string& reason) { counters(Id::kEventsDropped).Add({{"reason", reason}}).Increment(); }

void Metrics::set_ring_buffer_drops(std::uint64_t total) {
  if (total > ring_buffer_drops_seen_) {
    counter(Id::kRingBufferDrops).Increment(static_cast<double>(total - ring_buffer_drops_seen_));
    ring_buffer_drops_seen_ = total;
  }
}

void Metrics::set_node_condition(const std::string& condition, bool status) {
  gauges(Id::kNodeCondition).Add({{"condition", condition}}).Set(status ? 1 : 0);
}
void Metrics::status_write(const std::string& object, const std::string& result) {
  counters(Id::kStatusWrites).Add({{"object", object}, {"result", result}}).Increment();
}
void Metrics::set_readiness_gate_pods(std::size_t n) { gauge(Id::kReadinessGatePods).Set(static_cast<double>(n)); }
void Metrics::set_pod_watch_up(bool up) { gauges(Id::kPodWatchUp).Add({}).Set(up ? 1 : 0); }
void Metrics::pod_watch_lists(std::uint64_t n) { counter(Id::kPodWatchLists).Increment(static_cast<double>(n)); }
void Metrics::pod_watch_skipped(std::uint64_t n) { counter(Id::kPodWatchSkipped).Increment(static_cast<double>(n)); }

}  // namespace gdw
