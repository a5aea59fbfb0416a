// The catalogue of every Prometheus metric gpu-devwatch exports, as data: one row per
// family (name, type, help, label names), in metric_catalogue.cpp. Metrics registers them;
// each part of the daemon sets its own through a small typed view (repair_metrics.h,
// probe_metrics.h, health_metrics.h, node_metrics.h, daemon_metrics.h, event_metrics.h,
// status_metrics.h).
// Per-container series carry namespace/pod/container labels (a node has at most a few
// hundred pods) and are removed when the container goes away; every other label takes
// values from a bounded set.
#pragma once

#include <cstdint>
#include <span>
#include <string_view>
#include <vector>

namespace gdw {

enum class MetricType { kCounter, kGauge, kHistogram };

// One per family, in the table's order.
enum class MetricId : std::uint8_t {
  kDrift, kRegrants, kRepairDuration, kRepairsThrottled, kContainersWatched, kContainersMissingDevices,
  kContainersUnidentified, kContainersThrottled, kCheckpointChecksumValid, kCheckpointLoaded, kBuildInfo,
  kEventLoopErrors, kResyncs, kResyncDuration, kInotifyOverflows, kConfigReloads, kProbeLoaded,
  kSyscallHookAttached, kAttachHookAttached, kCapabilityHookAttached, kWritePathHookAttached,
  kRuleWritersDegraded, kPodResourcesCalls, kPodResourcesUp,
  kPodResourcesLatency,
  kAllocationDisagreements, kAmbiguousPodIdentities, kIdentityConflicts, kCdiSpecErrors,
  kCdiUnresolvedDevices, kDevicePrograms, kDeviceProgramsReplaced, kDeviceProgramsLoaded, kLooksAhead, kDeviceProgramStaleSwaps,
  kDeviceProgramSwapRevisions, kApplyWaits, kCheckpointStale,
  kCheckpointUnknownDevices, kRemediationHeld, kRemediations, kDevicePluginUp, kDevicePluginLatency,
  kCheckpointLastWrite, kNewestContainerStart, kCheckpointLag, kRevocations, kDeniedOpens,
  kRingBufferDrops, kProbeRecordDelay, kEventsSent, kEventsDropped, kExposedDevices, kContainersExposed,
  kEnvVisibleContainers, kNodeCondition, kStatusWrites, kReadinessGatePods, kPodWatchUp, kPodWatchLists,
  kPodWatchSkipped, kCount,
};

// One metric family, as data. Adding a metric: an Id, a row, and the view method that sets it.
struct MetricFamilySpec {
  enum class Series {
    kOnUse,    // no series until a method makes one
    kAtStart,  // made at registration: the one unlabeled series, or one per `values`
  };
  MetricId id;
  MetricType type;
  std::string_view name;
  std::string_view help;
  std::vector<std::string_view> labels{};  // the label names of every series
  Series series = Series::kOnUse;
  std::vector<std::string_view> values{};  // kAtStart with one label: its bounded values
  const std::vector<double>* buckets = nullptr;  // histograms
};

// The table, in registration (and so exposition) order.
std::span<const MetricFamilySpec> metric_families();

}  // namespace gdw
