#include "kubeletapi/device_plugins.h"

#include <dirent.h>
#include <fcntl.h>
#include <sys/stat.h>

#include <algorithm>
#include <cerrno>
#include <condition_variable>
#include <cstring>
#include <map>
#include <mutex>

#include "deviceplugin_service.grpc.pb.h"
#include "kubeletapi/grpc_support.h"

namespace gdw {
// Named, not anonymous: the types here are members of the header's Impl, which has
// external linkage (-Wsubobject-linkage, in a unity build).
namespace device_plugin_calls {

using kubeletapi::CompletionSignal;

using kubeletapi::kCancelWait;

constexpr char kOptionsCall[] = "DevicePlugin GetDevicePluginOptions";
constexpr char kKubeletSocket[] = "kubelet.sock";  // kubelet's registration server, not a plugin

// One round of probes: written by gRPC's callback threads, read by the loop thread.
struct Round {
  std::mutex mu;
  std::condition_variable finished;
  std::vector<DevicePluginProbe> results;  // sorted by socket name
  std::size_t running = 0;                 // probes that have not called back yet
  bool ready = false;                      // every probe has finished
};

// What gRPC uses until the probe's callback has run. Owned by the prober and freed on its
// thread, never from a callback.
// A plugin socket's channel, kept while the socket is there. Freed on the prober's thread: a
// channel destroyed on gRPC's own thread races with gRPC's shutdown at exit.
struct PluginChannel {
  std::shared_ptr<grpc::Channel> channel;
  std::unique_ptr<v1beta1::DevicePlugin::Stub> stub;
};

struct ProbeCall {
  grpc::ClientContext context;
  v1beta1::Empty request;
  v1beta1::DevicePluginOptions response;
};

Result<std::vector<std::string>> plugin_sockets(const std::string& dir) {
  DIR* d = ::opendir(dir.c_str());
  if (d == nullptr) return Error{"listing device plugin sockets in " + dir + ": " + std::strerror(errno)};
  std::vector<std::string> names;
  while (const dirent* e = ::readdir(d)) {
    std::string name = e->d_name;
    if (name == kKubeletSocket || name.size() <= 5 || name.compare(name.size() - 5, 5, ".sock") != 0) continue;
    struct stat st {};
    if (::fstatat(::dirfd(d), e->d_name, &st, AT_SYMLINK_NOFOLLOW) != 0 || !S_ISSOCK(st.st_mode)) continue;
    names.push_back(std::move(name));
  }
  ::closedir(d);
  std::sort(names.begin(), names.end());
  return names;
}

}  // namespace device_plugin_calls

using namespace device_plugin_calls;

struct DevicePluginProber::Impl {
  kubeletapi::GrpcLibraryRef grpc;  // first member: outlives the calls below
  std::string dir;
  Duration timeout{0};
  std::shared_ptr<CompletionSignal> signal;
  std::map<std::string, PluginChannel> channels;  // by socket path
  std::shared_ptr<Round> round;  // the round started last, until taken
  std::vector<std::unique_ptr<ProbeCall>> calls;  // its calls
};

Result<std::unique_ptr<DevicePluginProber>> DevicePluginProber::create(std::string dir, Duration timeout) {
  auto signal = CompletionSignal::create();
  if (!signal) return with_context("device plugin prober", signal.error());
  auto impl = std::make_unique<Impl>();
  impl->dir = std::move(dir);
  impl->timeout = timeout;
  impl->signal = std::move(*signal);
  return std::unique_ptr<DevicePluginProber>(new DevicePluginProber(std::move(impl)));
}

DevicePluginProber::DevicePluginProber(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}

DevicePluginProber::~DevicePluginProber() {
  if (!impl_->round) return;
  for (auto& call : impl_->calls) call->context.TryCancel();
  std::unique_lock lock(impl_->round->mu);
  if (!impl_->round->finished.wait_for(lock, kCancelWait, [&] { return impl_->round->running == 0; })) {
    // gRPC has not called back and may still use the calls: leaking them beats freeing them.
    for (auto& call : impl_->calls) static_cast<void>(call.release());
  }
}

int DevicePluginProber::fd() const { return impl_->signal->fd(); }

bool DevicePluginProber::busy() const { return impl_->round != nullptr; }

Status DevicePluginProber::start() {
  Impl& impl = *impl_;
  if (impl.round) return Error{"device plugin probe: the previous round's results have not been taken yet"};
  auto sockets = plugin_sockets(impl.dir);
  if (!sockets) return sockets.error();

  auto round = std::make_shared<Round>();
  round->results.resize(sockets->size());
  round->running = sockets->size();
  for (std::size_t i = 0; i < sockets->size(); ++i) {
    round->results[i].socket = (*sockets)[i];
    round->results[i].path = impl.dir + "/" + (*sockets)[i];
  }
  impl.round = round;
  std::erase_if(impl.channels, [&](const auto& entry) {
    return std::none_of(round->results.begin(), round->results.end(),
                        [&](const DevicePluginProbe& r) { return r.path == entry.first; });
  });
  if (sockets->empty()) {
    std::lock_guard lock(round->mu);
    round->ready = true;
    impl.signal->raise();
    return {};
  }

  const auto started = std::chrono::steady_clock::now();
  const auto deadline = std::chrono::system_clock::now() + impl.timeout;
  for (std::size_t i = 0; i < sockets->size(); ++i) {
    const std::string& path = round->results[i].path;
    PluginChannel& plugin = impl.channels[path];
    if (!plugin.channel) {
      plugin.channel = kubeletapi::unix_socket_channel(path);
      plugin.stub = v1beta1::DevicePlugin::NewStub(plugin.channel);
    }
    ProbeCall* call = impl.calls.emplace_back(std::make_unique<ProbeCall>()).get();
    call->context.set_deadline(deadline);
    // The callback shares the round and the signal: they outlive the prober if cancelling
    // outlasts the destructor's wait.
    plugin.stub->async()->GetDevicePluginOptions(
        &call->context, &call->request, &call->response,
        [round, i, signal = impl.signal, started, path,
         timeout = impl.timeout](grpc::Status status) {
          // Nothing escapes gRPC's callback thread (it would terminate the daemon): a
          // failure becomes this probe's error, and the round still completes.
          std::optional<CallError> error;
          try {
            if (!status.ok()) error = kubeletapi::classify_status(status, kOptionsCall, path, timeout);
          } catch (...) {
            error = kubeletapi::current_exception_error(kOptionsCall);
          }
          try {
            std::lock_guard lock(round->mu);
            DevicePluginProbe& result = round->results[i];
            result.latency = kubeletapi::elapsed_since(started);
            result.up = !error.has_value();
            result.error = std::move(error);
            if (--round->running == 0) {
              round->ready = true;
              round->finished.notify_all();
              signal->raise();
            }
          } catch (...) {
            // Only the mutex can throw here; the prober's wait is bounded (kCancelWait).
          }
        });
  }
  return {};
}

std::optional<std::vector<DevicePluginProbe>> DevicePluginProber::take() {
  std::optional<std::vector<DevicePluginProbe>> results;
  {
    std::shared_ptr<Round> round = impl_->round;
    if (!round) {
      impl_->signal->clear();
      return std::nullopt;
    }
    std::lock_guard lock(round->mu);  // callbacks raise the signal under it: no raise is lost
    impl_->signal->clear();
    if (!round->ready) return std::nullopt;
    results = std::move(round->results);
  }
  impl_->round.reset();
  impl_->calls.clear();
  return results;
}

}  // namespace gdw
