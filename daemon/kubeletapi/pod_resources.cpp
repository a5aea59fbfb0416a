#include "kubeletapi/pod_resources.h"

#include <condition_variable>
#include <mutex>

#include "kubeletapi/grpc_support.h"
#include "kubeletapi/pod_resources_decode.h"
#include "podresources_v1.grpc.pb.h"

namespace gdw {
// Named, not anonymous: the types here are members of the header's Impl, which has
// external linkage (-Wsubobject-linkage, in a unity build).
namespace pod_resources_calls {

using kubeletapi::CompletionSignal;

using kubeletapi::kCancelWait;

constexpr char kListCall[] = "PodResources List";

// Written by gRPC's callback thread, read by the loop thread.
struct Mailbox {
  std::mutex mu;
  std::condition_variable finished;
  std::optional<PodResourcesOutcome> outcome;
  bool running = false;  // a gRPC call has not called back yet
};

// What gRPC uses until the call's callback has run. Owned by the client and freed on its
// thread, never from the callback.
struct ListCall {
  grpc::ClientContext context;
  v1::ListPodResourcesRequest request;
  v1::ListPodResourcesResponse response;
};

// What the finished call says. Runs on gRPC's callback thread, so nothing may escape it: an
// exception (say, bad_alloc on a huge answer) becomes the call's error.
PodResourcesOutcome outcome_of(const grpc::Status& status, const ListCall& call,
                               std::chrono::steady_clock::time_point started, const std::string& path,
                               Duration timeout) noexcept {
  PodResourcesOutcome outcome;
  try {
    outcome.latency = kubeletapi::elapsed_since(started);
    if (status.ok()) {
      outcome.containers = pod_resources_containers(call.response);
    } else {
      outcome.error = kubeletapi::classify_status(status, kListCall, path, timeout);
    }
  } catch (...) {
    outcome.containers.clear();
    outcome.error = kubeletapi::current_exception_error(kListCall);
  }
  return outcome;
}

}  // namespace pod_resources_calls

using namespace pod_resources_calls;

struct PodResourcesClient::Impl {
  kubeletapi::GrpcLibraryRef grpc;  // first member: outlives the call below
  PodResourcesOptions options;
  // Freed on the client's thread: a channel destroyed on gRPC's own thread races with
  // gRPC's shutdown at exit.
  std::shared_ptr<grpc::Channel> channel;
  std::unique_ptr<v1::PodResourcesLister::Stub> stub;
  std::shared_ptr<CompletionSignal> signal;
  std::shared_ptr<Mailbox> mailbox = std::make_shared<Mailbox>();
  // The call started last, until its outcome is taken.
  std::unique_ptr<ListCall> call;
  bool busy = false;
  std::optional<std::chrono::steady_clock::time_point> last_start;

  void post(PodResourcesOutcome outcome) {
    std::lock_guard lock(mailbox->mu);
    mailbox->outcome = std::move(outcome);
    signal->raise();
  }
};

Result<std::unique_ptr<PodResourcesClient>> PodResourcesClient::create(PodResourcesOptions options) {
  auto signal = CompletionSignal::create();
  if (!signal) return with_context("PodResources client", signal.error());
  auto impl = std::make_unique<Impl>();
  impl->options = std::move(options);
  impl->channel = kubeletapi::unix_socket_channel(impl->options.socket_path);
  impl->stub = v1::PodResourcesLister::NewStub(impl->channel);
  impl->signal = std::move(*signal);
  return std::unique_ptr<PodResourcesClient>(new PodResourcesClient(std::move(impl)));
}

PodResourcesClient::PodResourcesClient(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}

PodResourcesClient::~PodResourcesClient() {
  if (!impl_->call) return;
  impl_->call->context.TryCancel();
  std::unique_lock lock(impl_->mailbox->mu);
  if (!impl_->mailbox->finished.wait_for(lock, kCancelWait, [&] { return !impl_->mailbox->running; })) {
    // gRPC has not called back and may still use the call: leaking it beats freeing it.
    static_cast<void>(impl_->call.release());
  }
}

int PodResourcesClient::fd() const { return impl_->signal->fd(); }

bool PodResourcesClient::busy() const { return impl_->busy; }

std::chrono::steady_clock::time_point PodResourcesClient::next_start() const {
  if (!impl_->last_start) return std::chrono::steady_clock::time_point::min();
  return *impl_->last_start + impl_->options.min_interval;
}

Status PodResourcesClient::start_list(std::chrono::steady_clock::time_point now) {
  Impl& impl = *impl_;
  if (impl.busy) return Error{std::string(kListCall) + ": the previous call's outcome has not been taken yet"};
  if (now < next_start()) {
    auto wait = std::chrono::duration_cast<Duration>(next_start() - now);
    return Error{std::string(kListCall) + ": at most one call per " + format_duration(impl.options.min_interval) +
                 ", next one in " + format_duration(wait)};
  }
  impl.last_start = now;
  impl.busy = true;
  const auto started = std::chrono::steady_clock::now();
  const std::string path = impl.options.socket_path;

  if (auto absent = kubeletapi::check_socket(kListCall, path)) {
    PodResourcesOutcome outcome;
    outcome.error = std::move(*absent);
    impl.post(std::move(outcome));
    return {};
  }

  impl.call = std::make_unique<ListCall>();
  ListCall* call = impl.call.get();
  call->context.set_deadline(std::chrono::system_clock::now() + impl.options.timeout);
  {
    std::lock_guard lock(impl.mailbox->mu);
    impl.mailbox->running = true;
  }
  // The callback shares the mailbox and the signal: they outlive the client if cancelling
  // outlasts the destructor's wait. The call itself is only read before `running` clears.
  impl.stub->async()->List(
      &call->context, &call->request, &call->response,
      [call, mailbox = impl.mailbox, signal = impl.signal, started, path,
       timeout = impl.options.timeout](grpc::Status status) {
        PodResourcesOutcome outcome = outcome_of(status, *call, started, path, timeout);
        try {
          std::lock_guard lock(mailbox->mu);
          mailbox->outcome = std::move(outcome);
          mailbox->running = false;
          mailbox->finished.notify_all();
          signal->raise();
        } catch (...) {
          // Only the mutex can throw here; the client's wait for `running` is bounded.
        }
      });
  return {};
}

std::optional<PodResourcesOutcome> PodResourcesClient::take() {
  std::optional<PodResourcesOutcome> outcome;
  {
    std::lock_guard lock(impl_->mailbox->mu);
    impl_->signal->clear();
    if (!impl_->mailbox->outcome) return std::nullopt;
    outcome = std::move(impl_->mailbox->outcome);
    impl_->mailbox->outcome.reset();
  }
  impl_->call.reset();
  impl_->busy = false;
  return outcome;
}

}  // namespace gdw
