// A client for kubelet's PodResources API (v1.PodResourcesLister/List) on its unix socket
// that never blocks the caller: start_list() returns at once, gRPC's own threads run the
// call under a deadline, and the outcome waits in take() while fd() is readable. Made for
// one event loop thread: watch fd() for EPOLLIN, then take().
#pragma once

#include <chrono>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "core/allocation_merge.h"
#include "core/config.h"
#include "core/result.h"
#include "kubeletapi/kubelet_call.h"

namespace gdw {

struct PodResourcesOptions {
  std::string socket_path;  // kubelet.pod_resources_socket
  Duration timeout{2000};   // kubelet.pod_resources_timeout: the deadline of one call
  // kubelet.pod_resources_interval: starts are at least this far apart, whatever the
  // caller asks, so a bug in the caller cannot hammer kubelet (100 QPS shared by the node).
  Duration min_interval{10000};
};

struct PodResourcesOutcome {
  // Every container of every pod kubelet lists, with its devices per resource; empty on error.
  std::vector<PodResourcesContainer> containers;
  std::optional<CallError> error;
  std::chrono::microseconds latency{0};  // from start_list() to the answer
  bool ok() const { return !error.has_value(); }
};

class PodResourcesClient {
 public:
  static Result<std::unique_ptr<PodResourcesClient>> create(PodResourcesOptions options);
  // Cancels a call in flight and waits (briefly: cancelling is local) for gRPC to let go.
  ~PodResourcesClient();
  PodResourcesClient(const PodResourcesClient&) = delete;
  PodResourcesClient& operator=(const PodResourcesClient&) = delete;

  // Readable when an outcome waits in take().
  int fd() const;

  // Starts a List call. Refused (Error, nothing started) while the previous call's outcome
  // has not been taken, or before min_interval has passed since the previous start. A
  // missing socket is not refused: its outcome (kSocketAbsent) is ready at once.
  Status start_list(std::chrono::steady_clock::time_point now = std::chrono::steady_clock::now());
  // The finished call's outcome, once; nullopt while it runs or when none was started.
  std::optional<PodResourcesOutcome> take();

  bool busy() const;  // started and not taken yet
  // The earliest time start_list() accepts a call (ignoring busy()).
  std::chrono::steady_clock::time_point next_start() const;

 private:
  struct Impl;
  explicit PodResourcesClient(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace gdw
