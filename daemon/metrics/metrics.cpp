#include "metrics/metrics.h"

#include <prometheus/counter.h>
#include <prometheus/exposer.h>
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
                       .Help("Opens of GPU device nodes that failed with EPERM inside a GPU container.")
                       .Register(r);
  ring_buffer_drops_ = &BuildCounter()
                            .Name("gpu_devwatch_probe_ring_buffer_drops_total")
                            .Help("Probe events lost because the ring buffer was full.")
                            .Register(r)
                            .Add({});
}

Metrics::~Metrics() = default;

Status Metrics::serve(const std::string& listen) {
  std::string address = listen;
  if (!address.empty() && address[0] == ':') address = "0.0.0.0" + address;
  try {
    exposer_ = std::make_unique<prometheus::Exposer>(address);
    exposer_->RegisterCollectable(registry_);
  } catch (const std::exception& e) {
    return Error{"serving metrics on " + listen + ": " + e.what()};
  }
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

void Metrics::forget(const ContainerLabels& c) {
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
void Metrics::set_device_programs(const std::string& owner, std::size_t n) {
  device_programs_->Add({{"owner", owner}}).Set(static_cast<double>(n));
}
void Metrics::programs_replaced(std::size_t n) { programs_replaced_->Increment(static_cast<double>(n)); }

void Metrics::set_checkpoint_stale(bool stale, std::size_t unknown_devices) {
  checkpoint_stale_->Set(stale ? 1 : 0);
  checkpoint_unknown_devices_->Set(static_cast<double>(unknown_devices));
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
void Metrics::denied_open(const ContainerLabels& c, const std::string& device) {
  container_counter(*denied_opens_, c, {{"device", device}}).Increment();
}
void Metrics::set_ring_buffer_drops(std::uint64_t total) {
  if (total > ring_buffer_drops_seen_) {
    ring_buffer_drops_->Increment(static_cast<double>(total - ring_buffer_drops_seen_));
    ring_buffer_drops_seen_ = total;
  }
}

}  // namespace gdw
