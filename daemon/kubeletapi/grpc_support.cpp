#include "kubeletapi/grpc_support.h"

#include <sys/eventfd.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

namespace gdw {

std::string to_string(CallErrorKind kind) {
  switch (kind) {
    case CallErrorKind::kSocketAbsent: return "socket-absent";
    case CallErrorKind::kDeadlineExceeded: return "deadline-exceeded";
    case CallErrorKind::kResourceExhausted: return "resource-exhausted";
    case CallErrorKind::kUnavailable: return "unavailable";
    case CallErrorKind::kOther: return "other";
  }
  return "other";
}

namespace kubeletapi {

Result<std::shared_ptr<CompletionSignal>> CompletionSignal::create() {
  int fd = ::eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
  if (fd < 0) return Error{std::string("eventfd: ") + std::strerror(errno)};
  return std::shared_ptr<CompletionSignal>(new CompletionSignal(fd));
}

CompletionSignal::~CompletionSignal() { ::close(fd_); }

void CompletionSignal::raise() {
  const std::uint64_t one = 1;
  // Cannot block (EFD_NONBLOCK) and cannot overflow at one write per finished call.
  while (::write(fd_, &one, sizeof one) < 0 && errno == EINTR) {
  }
}

void CompletionSignal::clear() {
  std::uint64_t count = 0;
  while (::read(fd_, &count, sizeof count) < 0 && errno == EINTR) {
  }
}

std::shared_ptr<grpc::Channel> unix_socket_channel(const std::string& path) {
  grpc::ChannelArguments args;
  args.SetInt(GRPC_ARG_MAX_RECONNECT_BACKOFF_MS, 1000);  // gRPC's default grows to 120 s
  // A node with many pods lists more than gRPC's 4 MiB default allows.
  args.SetMaxReceiveMessageSize(64 << 20);
  return grpc::CreateCustomChannel("unix://" + path, grpc::InsecureChannelCredentials(), args);
}

CallError classify_status(const grpc::Status& status, const std::string& call, const std::string& path,
                          Duration timeout) {
  const std::string where = call + " at unix://" + path + ": ";
  const std::string detail = status.error_message();
  switch (status.error_code()) {
    case grpc::StatusCode::DEADLINE_EXCEEDED:
      return {CallErrorKind::kDeadlineExceeded, where + "no answer within " + format_duration(timeout)};
    case grpc::StatusCode::RESOURCE_EXHAUSTED:
      return {CallErrorKind::kResourceExhausted, where + "throttled by the server (RESOURCE_EXHAUSTED: " + detail + ")"};
    case grpc::StatusCode::UNAVAILABLE:
      return {CallErrorKind::kUnavailable, where + "unavailable (" + detail + ")"};
    default:
      return {CallErrorKind::kOther,
              where + "failed with gRPC status " + std::to_string(static_cast<int>(status.error_code())) + " (" +
                  detail + ")"};
  }
}

std::optional<CallError> check_socket(const std::string& call, const std::string& path) {
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0) {
    const int err = errno;
    if (err == ENOENT || err == ENOTDIR) {
      return CallError{CallErrorKind::kSocketAbsent, call + " at unix://" + path + ": no socket there"};
    }
    return CallError{CallErrorKind::kOther, call + " at unix://" + path + ": " + std::strerror(err)};
  }
  if (!S_ISSOCK(st.st_mode)) {
    return CallError{CallErrorKind::kOther, call + " at unix://" + path + ": exists but is not a socket"};
  }
  return std::nullopt;
}

CallError current_exception_error(const char* call) noexcept {
  CallError error;  // kOther with an empty message if even the message cannot be built
  try {
    try {
      throw;
    } catch (const std::exception& e) {
      error.message = std::string(call) + ": failed in gRPC's callback: " + e.what();
    } catch (...) {
      error.message = std::string(call) + ": failed in gRPC's callback (unknown exception)";
    }
  } catch (...) {
  }
  return error;
}

std::chrono::microseconds elapsed_since(std::chrono::steady_clock::time_point started) {
  return std::chrono::duration_cast<std::chrono::microseconds>(std::chrono::steady_clock::now() - started);
}

}  // namespace kubeletapi
}  // namespace gdw
