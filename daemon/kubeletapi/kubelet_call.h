// How a call to a kubelet-side gRPC server (PodResources, a device plugin) failed. The kinds
// are what an operator acts on differently: nothing listening, a server that hangs, kubelet
// throttling us, a server that refuses connections, anything else.
#pragma once

#include <string>

namespace gdw {

enum class CallErrorKind {
  kSocketAbsent,       // no socket file at the path
  kDeadlineExceeded,   // no answer within the deadline (a hung server)
  kResourceExhausted,  // the server throttled the call (kubelet's 100 QPS limit)
  kUnavailable,        // could not connect or the connection broke
  kOther,
};
std::string to_string(CallErrorKind kind);  // "socket-absent", "deadline-exceeded", ...

struct CallError {
  CallErrorKind kind = CallErrorKind::kOther;
  std::string message;  // names the call and the socket
};

}  // namespace gdw
