// Kubernetes Events on the pod whose GPU access changed: what an incident says and the
// core/v1 Event bodies that carry it. Pure: no I/O, times are arguments.
#pragma once

#include <chrono>
#include <string>
#include <vector>

namespace gdw::kube {

using WallClock = std::chrono::system_clock;

// The involved object. Namespace and name come from the runtime's CRI annotations, the
// UID from the kernel-enforced cgroup path; all three end up in a URL or an object name,
// so valid_pod_ref() gates them.
struct PodRef {
  std::string pod_namespace;
  std::string name;
  std::string uid;
};
bool valid_pod_ref(const PodRef& pod);

// Why the daemon tells the pod's owners. kRevoked: access was taken away and given back
// (GPUAccessRevoked). The others: it stays lost (GPUAccessLost).
enum class Cause { kRevoked, kObserveMode, kGrantRefused, kThrottled };

struct IncidentFacts {
  PodRef pod;
  std::string container;
  std::vector<std::string> devices;  // node names: nvidia0, nvidia-uvm
  std::string writer;                // recognised, bounded name of who revoked; empty: unknown
  std::string writer_detail;         // pid, comm, executable, rule (tenant text: bounded below)
  std::chrono::nanoseconds repair_time{0};  // kRevoked: trigger to grant
  std::string problem;                      // kGrantRefused / kThrottled: what stopped the repair
};

struct Incident {
  PodRef pod;
  std::string reason;   // GPUAccessRevoked | GPUAccessLost
  std::string key;      // beside pod and reason, what makes two incidents the same event
  std::string message;  // the latest occurrence's text
};

// The longest message sent (events.k8s.io caps its note at 1 kB; core/v1 is kept the same).
inline constexpr std::size_t kMaxMessageBytes = 1024;

Incident make_incident(Cause cause, const IncidentFacts& facts);

// "2024-05-01T12:00:00Z": metav1.Time (seconds).
std::string rfc3339(WallClock::time_point t);

// As kubelet's recorder names events: "<pod name>.<wall-clock nanoseconds, hex>".
std::string event_name(const std::string& pod_name, WallClock::time_point t);

struct ReportingSource {
  std::string component = "gpu-devwatch";
  std::string host;  // the node name
};

// One aggregated event as it stands.
struct EventState {
  PodRef pod;
  std::string name;
  std::string reason;
  std::string message;
  std::uint32_t count = 0;
  WallClock::time_point first_seen;
  WallClock::time_point last_seen;
};

// The Event object for POST /api/v1/namespaces/<ns>/events.
std::string create_body(const EventState& e, const ReportingSource& source);
// The strategic-merge patch for PATCH .../events/<name>: count, lastTimestamp, message.
std::string patch_body(const EventState& e);

std::string events_path(const std::string& pod_namespace);
std::string event_path(const std::string& pod_namespace, const std::string& name);

}  // namespace gdw::kube
