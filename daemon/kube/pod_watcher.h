// Learns which pods of this node declare the readiness gate gpu-devwatch.io/devices-ready:
// lists them (fieldSelector=spec.nodeName=<node>) from the API server's watch cache
// (resourceVersion=0, no paging: no quorum read of etcd, as kubelet's own reflector
// lists), then watches from the list's resourceVersion, on a thread of its own (a watch is
// a long-lived request; the status writes share the events' worker). A watch that ends is
// resumed from the last resourceVersion seen; "410 Gone" (as an HTTP status or an ERROR
// event) lists again; failures back off with jitter, at least the server's Retry-After. Pods are tenant input: a page, an event line and the set of gated
// pods kept are bounded (kube/pod_gates.h parses them), and a pod that does not declare the
// gate is never kept. The loop reads the result with view(); `changed` tells it when.
#pragma once

#include <condition_variable>
#include <cstdint>
#include <functional>
#include <map>
#include <mutex>
#include <optional>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "core/result.h"
#include "kube/api_transport.h"
#include "kube/backoff.h"
#include "kube/pod_gates.h"
#include "kube/status_planner.h"

namespace gdw::kube {

struct PodWatchOptions {
  std::string node;
  std::size_t max_pods = 512;  // gated pods kept (a node runs at most a few hundred pods)
  std::size_t max_list_items = 2000;  // pods in one list answer (a node's: kubelet's max-pods)
  // A node's pods in one answer (the cache does not page): 64 MiB holds hundreds of large pods.
  std::size_t max_page_bytes = 64u << 20;
  std::size_t max_event_bytes = 2u << 20;  // one watch event line
  // timeoutSeconds asked of the API server: drawn from [watch_timeout, 2 × watch_timeout),
  // as client-go's reflector does, so that a fleet's watches do not all end together.
  std::chrono::seconds watch_timeout{300};
  std::chrono::seconds idle_timeout{120};   // nothing (not even a bookmark) for this long: dead
  std::chrono::milliseconds request_timeout{30000};  // a list page
  std::chrono::milliseconds backoff_first{500};
  std::chrono::milliseconds backoff_max{30000};
  double jitter = 0.5;  // kube/backoff.h
};

struct PodWatchView {
  std::vector<GatedPod> pods;  // this node's pods that declare the gate
  bool synced = false;         // a whole list has been read
  std::uint64_t generation = 0;
  std::uint64_t lists = 0;     // lists completed
  std::uint64_t list_requests = 0;  // list requests made (each page one)
  std::uint64_t watches = 0;   // watch requests started
  std::uint64_t gone = 0;      // 410 Gone: listed again
  std::uint64_t skipped = 0;   // events or pods not used: too large, malformed, over max_pods
  std::string problem;         // why the last list or watch failed; "" once one works again
};

class PodWatcher {
 public:
  // `changed` is called on the watcher's thread after view() changed.
  PodWatcher(ApiEndpoint endpoint, PodWatchOptions options, std::function<void()> changed);
  ~PodWatcher();  // stops the request in flight and joins
  PodWatcher(const PodWatcher&) = delete;
  PodWatcher& operator=(const PodWatcher&) = delete;

  PodWatchView view() const;

 private:
  enum class WatchEnd { kStopped, kGone, kEnded, kFailed };
  void run();
  Status list();
  WatchEnd watch(std::string& why);
  // A watch stream's bytes; false to end the watch (410).
  bool take_bytes(std::string_view bytes, bool& gone);
  void take_line(std::string_view line, bool& gone);
  void consider(const PodFacts& pod);
  void publish(bool synced_now = false);
  void fail(const std::string& why);
  void sleep_for(std::chrono::milliseconds d);
  Result<std::string> get(const std::string& path, std::string& body);
  std::string selector() const;

  PodWatchOptions options_;
  std::function<void()> changed_;
  Backoff backoff_;
  std::mt19937_64 rng_;
  std::optional<std::chrono::seconds> retry_after_;  // the last failed answer's
  TokenFile token_;
  ApiTransport transport_;
  // The watcher thread's own state.
  std::map<std::string, GatedPod> pods_;
  std::string resource_version_;
  std::string line_;
  bool discarding_ = false;
  bool connected_ = false;
  bool dirty_ = false;
  // What view() returns.
  mutable std::mutex mu_;
  std::condition_variable cv_;
  bool stop_ = false;
  PodWatchView view_;
  std::thread thread_;
};

// The query string of `token` (a continue token: base64 and more) percent-encoded.
std::string percent_encode(const std::string& text);

}  // namespace gdw::kube
