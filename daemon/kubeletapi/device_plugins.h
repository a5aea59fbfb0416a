// A liveness probe for the device plugins registered with kubelet: every *.sock in the
// device-plugins directory (except kubelet's own kubelet.sock) gets a GetDevicePluginOptions
// call with a short deadline. A plugin whose gRPC server does not answer that will not
// answer kubelet's Allocate either, and kubelet waits on Allocate without a timeout, which
// freezes pod admission. Never blocks the caller: start() returns at once, gRPC's threads
// run the calls, and the round's results wait in take() while fd() is readable.
#pragma once

#include <chrono>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "core/config.h"
#include "core/result.h"
#include "kubeletapi/kubelet_call.h"

namespace gdw {

struct DevicePluginProbe {
  std::string socket;  // file name in the directory: "nvidia-gpu.sock"
  std::string path;
  bool up = false;
  std::chrono::microseconds latency{0};  // until the answer or the failure
  std::optional<CallError> error;        // set exactly when !up
};

class DevicePluginProber {
 public:
  // `dir` is kubelet.device_plugins_dir, `timeout` kubelet.plugin_probe_timeout.
  static Result<std::unique_ptr<DevicePluginProber>> create(std::string dir, Duration timeout);
  // Cancels the probes in flight and waits (briefly: cancelling is local) for gRPC.
  ~DevicePluginProber();
  DevicePluginProber(const DevicePluginProber&) = delete;
  DevicePluginProber& operator=(const DevicePluginProber&) = delete;

  // Readable when a round's results wait in take().
  int fd() const;

  // Lists the sockets now and probes each. Refused while the previous round's results have
  // not been taken; an Error too when the directory cannot be listed. A round with no
  // sockets is ready at once (no results). A round takes at most about `timeout`.
  Status start();
  // The finished round, one result per socket sorted by name; nullopt while probes run.
  std::optional<std::vector<DevicePluginProbe>> take();
  bool busy() const;  // started and not taken yet

 private:
  struct Impl;
  explicit DevicePluginProber(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace gdw
