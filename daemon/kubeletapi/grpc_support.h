// Shared by the kubeletapi .cpp files only: it includes gRPC, which the rest of the daemon
// never sees.
#pragma once

#include <grpc/grpc.h>
#include <grpcpp/grpcpp.h>

#include <chrono>
#include <memory>
#include <string>

#include "core/config.h"
#include "core/result.h"
#include "kubeletapi/kubelet_call.h"

namespace gdw::kubeletapi {

// An eventfd raised by gRPC's threads when a call finishes and cleared by the event loop
// thread, so the loop learns of completions through an fd it polls. Shared between the
// owner and the calls in flight: a call finishing after its owner is gone still writes to
// its own fd, never to a reused descriptor number.
class CompletionSignal {
 public:
  static Result<std::shared_ptr<CompletionSignal>> create();
  ~CompletionSignal();
  CompletionSignal(const CompletionSignal&) = delete;
  CompletionSignal& operator=(const CompletionSignal&) = delete;

  int fd() const { return fd_; }
  void raise();
  void clear();

 private:
  explicit CompletionSignal(int fd) : fd_(fd) {}
  int fd_;
};

// Keeps gRPC initialised while a client lives. Otherwise destroying a call's channel, the
// last gRPC object, shuts gRPC down there and then (joining its threads: a stall in the
// event loop), and the next call starts its threads again.
class GrpcLibraryRef {
 public:
  GrpcLibraryRef() { grpc_init(); }
  ~GrpcLibraryRef() { grpc_shutdown(); }
  GrpcLibraryRef(const GrpcLibraryRef&) = delete;
  GrpcLibraryRef& operator=(const GrpcLibraryRef&) = delete;
};

// How long teardown waits for a cancelled call's callback. Cancelling is local to gRPC,
// so the callback follows within milliseconds; the bound only keeps a gRPC bug from
// hanging shutdown.
inline constexpr auto kCancelWait = std::chrono::seconds(2);

// A channel to unix://<path>, kept across calls: a fresh connection per call costs the
// caller's thread a synchronous connect. It reconnects after at most about a second of
// backoff, so a restarted kubelet or plugin is reachable again by the next call.
std::shared_ptr<grpc::Channel> unix_socket_channel(const std::string& path);

// "<call> at unix://<path>: <what happened>", with the kind the status code maps to.
CallError classify_status(const grpc::Status& status, const std::string& call, const std::string& path,
                          Duration timeout);

// kSocketAbsent / kOther when `path` is missing or not a socket; nullopt when it is one.
std::optional<CallError> check_socket(const std::string& call, const std::string& path);

// The exception being handled (call only inside a catch block) as a kOther CallError. For
// gRPC callback threads: an exception escaping one would terminate the daemon, so every
// callback catches at its boundary and reports this instead. Never throws.
CallError current_exception_error(const char* call) noexcept;

// How long since `started`, for latency reports.
std::chrono::microseconds elapsed_since(std::chrono::steady_clock::time_point started);

}  // namespace gdw::kubeletapi
