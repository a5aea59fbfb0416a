#include "metrics/metrics.h"

#include <prometheus/counter.h>
#include <prometheus/family.h>
#include <prometheus/gauge.h>
#include <prometheus/histogram.h>
#include <prometheus/registry.h>
#include <prometheus/text_serializer.h>

#include <exception>

#include "build_info.h"

namespace gdw {

using prometheus::BuildCounter;
using prometheus::BuildGauge;
using prometheus::BuildHistogram;

namespace {

// From 10 µs (the repair target is well under 1 ms) to 1 s.
const prometheus::Histogram::BucketBoundaries kRepairBuckets = {
    0.00001, 0.000025, 0.00005, 0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.1, 1};
const prometheus::Histogram::BucketBoundaries kResyncBuckets = {0.001, 0.005, 0.01, 0.025, 0.05, 0.1,
                                                                0.25,  0.5,   1,    2.5,   5};

std::map<std::string, std::string> labels_of(const ContainerLabels& c) {
  return {{"namespace", c.pod_namespace}, {"pod", c.pod}, {"container", c.container}};
}

}  // namespace

Metrics::Metrics() : registry_(std::make_shared<prometheus::Registry>()) {
  auto& r = *registry_;
  drift_ = &BuildCounter()
                .Name("gpu_devwatch_drift_total")
                .Help("A device a container must have was found missing from its device cgroup.")
                .Register(r);
  regrants_ = &BuildCounter()
                   .Name("gpu_devwatch_regrants_total")
                   .Help("Device grants written back, by result (success|error) and method (cgroupfs|bpf|systemd).")
                   .Register(r);
  repair_duration_ = &BuildHistogram()
                          .Name("gpu_devwatch_repair_duration_seconds")
                          .Help("Time from the event that revealed missing devices to the grant written.")
                          .Register(r);
  repair_duration_all_ = &repair_duration_->Add({}, kRepairBuckets);
  throttled_ = &BuildCounter()
                    .Name("gpu_devwatch_repairs_throttled_total")
                    .Help("Repairs delayed because the container's devices were revoked faster than repair.max_per_minute.")
                    .Register(r);
  watched_ = &BuildGauge().Name("gpu_devwatch_containers_watched").Help("GPU containers whose device cgroups are watched.").Register(r).Add({});
  missing_ = &BuildGauge()
                  .Name("gpu_devwatch_containers_missing_devices")
                  .Help("GPU containers missing at least one device right now.")
                  .Register(r)
                  .Add({});
  unidentified_ = &BuildGauge()
                       .Name("gpu_devwatch_containers_unidentified")
                       .Help("Containers in pods holding devices whose OCI bundle was not found (not checked, not guessed).")
                       .Register(r)
                       .Add({});
  fighting_ = &BuildGauge()
                   .Name("gpu_devwatch_containers_throttled")
                   .Help("GPU containers whose devices are revoked faster than repair.max_per_minute right now.")
                   .Register(r)
                   .Add({});
  checksum_valid_ = &BuildGauge()
                         .Name("gpu_devwatch_checkpoint_checksum_valid")
                         .Help("1 when the kubelet checkpoint's checksum verifies, 0 when it does not.")
                         .Register(r)
                         .Add({});
  checkpoint_loaded_ = &BuildGauge()
                            .Name("gpu_devwatch_checkpoint_loaded")
                            .Help("1 when the last read of the kubelet checkpoint succeeded.")
                            .Register(r)
                            .Add({});
  BuildGauge()
      .Name("gpu_devwatch_build_info")
      .Help("Version and git revision of the running gpu-devwatch.")
      .Register(r)
      .Add({{"version", GDW_VERSION}, {"revision", GDW_GIT_REVISION}})
      .Set(1);
  loop_errors_ = &BuildCounter()
                      .Name("gpu_devwatch_event_loop_errors_total")
                      .Help("Errors in the daemon's event handlers, by source.")
                      .Register(r);
  resyncs_ = &BuildCounter()
                  .Name("gpu_devwatch_resyncs_total")
                  .Help("Full re-reads of every container, by reason (startup|periodic|overflow|reload|signal).")
                  .Register(r);
  resync_duration_ = &BuildHistogram()
                          .Name("gpu_devwatch_resync_duration_seconds")
                          .Help("Duration of a full resync.")
                          .Register(r)
                          .Add({}, kResyncBuckets);
  inotify_overflows_ = &BuildCounter()
                            .Name("gpu_devwatch_inotify_overflows_total")
                            .Help("inotify queue overflows (each triggers a full resync).")
                            .Register(r)
                            .Add({});
  config_reloads_ = &BuildCounter()
                         .Name("gpu_devwatch_config_reloads_total")
                         .Help("Configuration reloads on SIGHUP, by result (success|error).")
                         .Register(r);
  probe_loaded_ = &BuildGauge()
                       .Name("gpu_devwatch_probe_loaded")
                       .Help("1 when the eBPF probe is loaded, 0 when the daemon runs on inotify alone.")
                       .Register(r)
                       .Add({});
  syscall_hook_attached_ = &BuildGauge()
                                .Name("gpu_devwatch_probe_syscall_hook_attached")
                                .Help("1 while the probe's syscall hook is attached (denied opens, exact v2 program events, rule-write results); it slows every syscall on the node.")
                                .Register(r)
                                .Add({});
  pod_resources_calls_ = &BuildCounter()
                              .Name("gpu_devwatch_pod_resources_calls_total")
                              .Help("Calls to kubelet's PodResources List, by result (ok, socket-absent, deadline-exceeded, resource-exhausted, unavailable, other).")
                              .Register(r);
  pod_resources_up_ = &BuildGauge()
                           .Name("gpu_devwatch_pod_resources_up")
                           .Help("1 when the last PodResources List call succeeded.")
                           .Register(r);
  pod_resources_latency_ = &BuildGauge()
                                .Name("gpu_devwatch_pod_resources_latency_seconds")
                                .Help("Duration of the last PodResources List call (until its answer or failure).")
                                .Register(r);
  disagreements_ = &BuildGauge()
                        .Name("gpu_devwatch_allocation_disagreements")
                        .Help("Containers whose devices the checkpoint and the PodResources API report differently.")
                        .Register(r)
                        .Add({});
  ambiguous_pod_identities_ = &BuildGauge()
                                   .Name("gpu_devwatch_ambiguous_pod_identities")
                                   .Help("Pod names (namespace/name) held by more than one live pod UID: PodResources entries for them are not used (checkpoint entries, keyed by UID, are).")
                                   .Register(r)
                                   .Add({});
  identity_conflicts_ = &BuildGauge()
                            .Name("gpu_devwatch_identity_conflicts")
                            .Help("Containers whose OCI bundle contradicts their cgroup (pod UID, runtime, container ID): the bundle is not used.")
                            .Register(r)
                            .Add({});
  cdi_spec_errors_ = &BuildGauge()
                          .Name("gpu_devwatch_cdi_spec_errors")
                          .Help("CDI spec files in cdi.spec_dirs that could not be read or parsed: their devices are not defined.")
                          .Register(r)
                          .Add({});
  cdi_unresolved_devices_ = &BuildGauge()
                                 .Name("gpu_devwatch_cdi_unresolved_devices")
                                 .Help("CDI device names allocated to running GPU containers (AllocResp, DRA claims) that no CDI spec defines: nothing is granted for them.")
                                 .Register(r)
                                 .Add({});
  device_programs_ = &BuildGauge()
                         .Name("gpu_devwatch_device_programs")
                         .Help("cgroup v2: device programs attached to watched GPU containers, by owner (ours, systemd, runtime).")
                         .Register(r);
  programs_replaced_ = &BuildCounter()
                            .Name("gpu_devwatch_device_programs_replaced_total")
                            .Help("cgroup v2: device programs that repairs replaced or detached.")
                            .Register(r)
                            .Add({});
  checkpoint_stale_ = &BuildGauge()
                           .Name("gpu_devwatch_checkpoint_stale")
                           .Help("1 when the kubelet checkpoint names devices this host does not have or another boot's BootID.")
                           .Register(r)
                           .Add({});
  checkpoint_unknown_devices_ = &BuildGauge()
                                     .Name("gpu_devwatch_checkpoint_unknown_devices")
                                     .Help("Device IDs in the kubelet checkpoint that are not on this host.")
                                     .Register(r)
                                     .Add({});
  remediation_held_ = &BuildGauge()
                           .Name("gpu_devwatch_checkpoint_remediation_held")
                           .Help("1 for why a stale checkpoint is not remediated now: inventory-unconfirmed (no fresh "
                                 "inventory, NVML asked again), awaiting-confirmation (kubelet.stale_confirm_after), "
                                 "devices-in-use (running containers hold devices it names).")
                           .Register(r);
  for (const char* reason : {"inventory-unconfirmed", "awaiting-confirmation", "devices-in-use"})
    remediation_held_->Add({{"reason", reason}}).Set(0);
  remediations_ = &BuildCounter()
                       .Name("gpu_devwatch_checkpoint_remediations_total")
                       .Help("Stale checkpoints moved aside and kubelet restarted (kubelet.remediate_stale_checkpoint), by result.")
                       .Register(r);
  plugin_up_ = &BuildGauge()
                    .Name("gpu_devwatch_device_plugin_up")
                    .Help("1 when the device plugin on this socket answered GetDevicePluginOptions within the deadline.")
                    .Register(r);
  plugin_latency_ = &BuildGauge()
                         .Name("gpu_devwatch_device_plugin_probe_latency_seconds")
                         .Help("Duration of the last GetDevicePluginOptions probe of the plugin on this socket.")
                         .Register(r);
  checkpoint_last_write_ = &BuildGauge()
                                .Name("gpu_devwatch_checkpoint_last_write_timestamp_seconds")
                                .Help("When kubelet last wrote its device checkpoint (it does on every allocation).")
                                .Register(r)
                                .Add({});
  newest_container_start_ = &BuildGauge()
                                 .Name("gpu_devwatch_newest_container_start_timestamp_seconds")
                                 .Help("When the newest running container's cgroup was created.")
                                 .Register(r)
                                 .Add({});
  checkpoint_lag_ = &BuildGauge()
                         .Name("gpu_devwatch_checkpoint_lag_seconds")
                         .Help("How much older the newest allocation in the checkpoint is than the newest running container.")
                         .Register(r)
                         .Add({});
  revocations_ = &BuildCounter()
                      .Name("gpu_devwatch_revocations_total")
                      .Help("Writes that revoked a GPU container's devices, by recognised writer.")
                      .Register(r);
  denied_opens_ = &BuildCounter()
                       .Name("gpu_devwatch_denied_opens_total")
                       .Help("Opens that failed with EPERM inside a GPU container: device is the container's GPU node "
                             "opened by its registered path, or other (anything else).")
                       .Register(r);
  ring_buffer_drops_ = &BuildCounter()
                            .Name("gpu_devwatch_probe_ring_buffer_drops_total")
                            .Help("Probe events lost because the ring buffer was full.")
                            .Register(r)
                            .Add({});
  events_sent_ = &BuildCounter()
                      .Name("gpu_devwatch_events_sent_total")
                      .Help("Kubernetes Event writes (POST or PATCH) the API server accepted.")
                      .Register(r)
                      .Add({});
  events_dropped_ = &BuildCounter()
                         .Name("gpu_devwatch_events_dropped_total")
                         .Help("Kubernetes Event writes dropped, by reason (queue_full, unreachable, rejected, credentials, invalid_object).")
                         .Register(r);
  for (const char* reason : {"queue_full", "unreachable", "rejected", "credentials", "invalid_object"})
    events_dropped_->Add({{"reason", reason}});
  exposed_devices_ = &BuildGauge()
                          .Name("gpu_devwatch_exposed_devices")
                          .Help("Devices a GPU container must have that the next re-apply of its device policy would "
                                "revoke: its OCI spec's device rules do not allow them (runtime re-apply), or, on the "
                                "systemd driver, its scope's DeviceAllow= lacks them (daemon-reload).")
                          .Register(r);
  containers_exposed_ = &BuildGauge()
                             .Name("gpu_devwatch_containers_exposed")
                             .Help("GPU containers with at least one exposed device (gpu_devwatch_exposed_devices > 0).")
                             .Register(r)
                             .Add({});
  env_visible_containers_ = &BuildGauge()
                                 .Name("gpu_devwatch_env_visible_containers")
                                 .Help("Containers without a GPU allocation whose NVIDIA_VISIBLE_DEVICES names GPUs of "
                                       "this node (restored only with devices.env_visible: restore).")
                                 .Register(r)
                                 .Add({});
}

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

prometheus::Counter& Metrics::container_counter(prometheus::Family<prometheus::Counter>& family,
                                                const ContainerLabels& c, std::map<std::string, std::string> extra) {
  auto labels = labels_of(c);
  labels.insert(extra.begin(), extra.end());
  prometheus::Counter& counter = family.Add(labels);
  auto& series = by_container_[c];
  bool known = false;
  for (const auto& s : series) known |= s.counter == &counter;
  if (!known) series.push_back(Series{&family, &counter});
  return counter;
}

void Metrics::drift(const ContainerLabels& c, const std::string& device) {
  container_counter(*drift_, c, {{"device", device}}).Increment();
}

void Metrics::regrant(bool success, const std::string& method) {
  regrants_->Add({{"result", success ? "success" : "error"}, {"method", method}}).Increment();
}

void Metrics::repair_duration(double seconds) { repair_duration_all_->Observe(seconds); }
void Metrics::throttled(const ContainerLabels& c) { container_counter(*throttled_, c).Increment(); }
void Metrics::set_containers_watched(std::size_t n) { watched_->Set(static_cast<double>(n)); }
void Metrics::set_containers_missing_devices(std::size_t n) { missing_->Set(static_cast<double>(n)); }
void Metrics::set_containers_unidentified(std::size_t n) { unidentified_->Set(static_cast<double>(n)); }
void Metrics::set_containers_throttled(std::size_t n) { fighting_->Set(static_cast<double>(n)); }

void Metrics::set_container_exposure(const ContainerLabels& c, std::optional<std::size_t> exposed_devices,
                                     bool env_visible) {
  if (exposed_devices) {
    exposed_devices_->Add(labels_of(c)).Set(static_cast<double>(*exposed_devices));
    exposed_[c] = *exposed_devices;
  } else if (exposed_.erase(c)) {
    exposed_devices_->Remove(&exposed_devices_->Add(labels_of(c)));
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
  containers_exposed_->Set(static_cast<double>(exposed));
  env_visible_containers_->Set(static_cast<double>(env_visible_.size()));
}

void Metrics::forget(const ContainerLabels& c) {
  set_container_exposure(c, std::nullopt, false);
  auto it = by_container_.find(c);
  if (it == by_container_.end()) return;
  for (const auto& s : it->second) s.family->Remove(s.counter);
  by_container_.erase(it);
}

void Metrics::set_checkpoint_checksum_valid(bool valid) { checksum_valid_->Set(valid ? 1 : 0); }
void Metrics::set_checkpoint_loaded(bool ok) { checkpoint_loaded_->Set(ok ? 1 : 0); }
void Metrics::event_loop_error(const std::string& source) { loop_errors_->Add({{"source", source}}).Increment(); }

void Metrics::resync(const std::string& reason, double seconds) {
  resyncs_->Add({{"reason", reason}}).Increment();
  resync_duration_->Observe(seconds);
}

void Metrics::inotify_overflow() { inotify_overflows_->Increment(); }
void Metrics::config_reload(bool success) {
  config_reloads_->Add({{"result", success ? "success" : "error"}}).Increment();
}
void Metrics::pod_resources_call(const std::string& result, double latency_seconds) {
  pod_resources_calls_->Add({{"result", result}}).Increment();
  pod_resources_up_->Add({}).Set(result == "ok" ? 1 : 0);
  pod_resources_latency_->Add({}).Set(latency_seconds);
}
void Metrics::set_allocation_disagreements(std::size_t n) { disagreements_->Set(static_cast<double>(n)); }
void Metrics::set_ambiguous_pod_identities(std::size_t n) { ambiguous_pod_identities_->Set(static_cast<double>(n)); }
void Metrics::set_identity_conflicts(std::size_t n) { identity_conflicts_->Set(static_cast<double>(n)); }
void Metrics::set_cdi_spec_errors(std::size_t n) { cdi_spec_errors_->Set(static_cast<double>(n)); }
void Metrics::set_cdi_unresolved_devices(std::size_t n) { cdi_unresolved_devices_->Set(static_cast<double>(n)); }
void Metrics::set_device_programs(const std::string& owner, std::size_t n) {
  device_programs_->Add({{"owner", owner}}).Set(static_cast<double>(n));
}
void Metrics::programs_replaced(std::size_t n) { programs_replaced_->Increment(static_cast<double>(n)); }

void Metrics::set_checkpoint_stale(bool stale, std::size_t unknown_devices) {
  checkpoint_stale_->Set(stale ? 1 : 0);
  checkpoint_unknown_devices_->Set(static_cast<double>(unknown_devices));
}
void Metrics::set_checkpoint_remediation_held(const std::string& reason) {
  for (const char* r : {"inventory-unconfirmed", "awaiting-confirmation", "devices-in-use"})
    remediation_held_->Add({{"reason", r}}).Set(reason == r ? 1 : 0);
}

void Metrics::checkpoint_remediation(bool success) {
  remediations_->Add({{"result", success ? "success" : "error"}}).Increment();
}
void Metrics::set_device_plugin(const std::string& socket, bool up, double latency_seconds) {
  plugin_up_->Add({{"socket", socket}}).Set(up ? 1 : 0);
  plugin_latency_->Add({{"socket", socket}}).Set(latency_seconds);
}
void Metrics::forget_device_plugin(const std::string& socket) {
  plugin_up_->Remove(&plugin_up_->Add({{"socket", socket}}));
  plugin_latency_->Remove(&plugin_latency_->Add({{"socket", socket}}));
}
void Metrics::set_checkpoint_last_write(double unix_seconds) {
  checkpoint_last_write_seconds_ = unix_seconds;
  checkpoint_last_write_->Set(unix_seconds);
  update_checkpoint_lag();
}
void Metrics::set_newest_container_start(double unix_seconds) {
  newest_container_start_seconds_ = unix_seconds;
  newest_container_start_->Set(unix_seconds);
  update_checkpoint_lag();
}
void Metrics::update_checkpoint_lag() {
  const double lag = newest_container_start_seconds_ - checkpoint_last_write_seconds_;
  checkpoint_lag_->Set(checkpoint_last_write_seconds_ > 0 && lag > 0 ? lag : 0);
}

void Metrics::set_probe_loaded(bool loaded) { probe_loaded_->Set(loaded ? 1 : 0); }
void Metrics::set_syscall_hook_attached(bool attached) { syscall_hook_attached_->Set(attached ? 1 : 0); }
void Metrics::revocation(const std::string& writer) { revocations_->Add({{"writer", writer}}).Increment(); }
void Metrics::denied_open(const ContainerLabels& c, const std::string& device, std::uint64_t count) {
  container_counter(*denied_opens_, c, {{"device", device}}).Increment(static_cast<double>(count));
}
void Metrics::event_sent() { events_sent_->Increment(); }

void Metrics::event_dropped(const std::string& reason) { events_dropped_->Add({{"reason", reason}}).Increment(); }

void Metrics::set_ring_buffer_drops(std::uint64_t total) {
  if (total > ring_buffer_drops_seen_) {
    ring_buffer_drops_->Increment(static_cast<double>(total - ring_buffer_drops_seen_));
    ring_buffer_drops_seen_ = total;
  }
}

}  // namespace gdw
