// What the pod readiness gate needs to know of a pod, read from the API server's JSON (a
// PodList page, or one line of a watch stream) with a SAX parser that keeps only these
// fields: namespace, name, UID, resourceVersion, spec.nodeName, whether
// spec.readinessGates declares gpu-devwatch.io/devices-ready, status.phase, that
// condition's status, and how many containers it declares and how many have started. A pod's spec is tenant input: nothing else of it is kept, no
// string longer than a Kubernetes name is copied, the nesting tracked is bounded, and a
// field counts only at its exact place in the pod object (a "readinessGates" key anywhere
// else declares nothing). Pure: strings in, values out.
#pragma once

#include <cstddef>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "core/result.h"
#include "kube/event_model.h"

namespace gdw::kube {

inline constexpr std::string_view kReadinessGate = "gpu-devwatch.io/devices-ready";

struct PodFacts {
  PodRef pod;
  std::string resource_version;
  std::string node_name;
  std::string phase;
  bool declares_gate = false;
  std::optional<bool> gate_status;  // the condition as the API server has it; nullopt: absent
  std::size_t containers = 0;       // spec.containers
  std::size_t started = 0;          // status.containerStatuses with started: true
  // Namespace, name and UID are valid object references (valid_pod_ref) and every kept
  // field fitted its bound.
  bool valid = false;
};

// Whether the gate is ours to write on this node: declared, valid, on `node`, not ended.
bool gate_applies(const PodFacts& pod, const std::string& node);
// Whether the pod runs with every container it declares started (a Pending pod never).
bool all_started(const PodFacts& pod);

struct PodListPage {
  std::vector<PodFacts> pods;
  std::string resource_version;  // the list's
  std::string continue_token;    // empty: the last page
};
// A PodList body. At most `max_items` pods are read; more is an error.
Result<PodListPage> parse_pod_list(std::string_view json, std::size_t max_items = 1000);

struct WatchEvent {
  enum class Type { kAdded, kModified, kDeleted, kBookmark, kError, kOther } type = Type::kOther;
  PodFacts pod;         // the object (kBookmark: only its resourceVersion)
  long error_code = 0;  // kError: the Status object's code (410: the resourceVersion is gone)
};
// One line of a watch stream.
Result<WatchEvent> parse_watch_event(std::string_view json);

}  // namespace gdw::kube
