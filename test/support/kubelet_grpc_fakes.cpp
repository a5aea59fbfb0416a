#include "support/kubelet_grpc_fakes.h"

#include <poll.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <cstring>
#include <stdexcept>
#include <thread>

#include "kubeletapi/pod_resources.h"
#include "support/temp_dir.h"

namespace gdw::test {
namespace {

std::unique_ptr<grpc::Server> serve(const std::string& socket_path, grpc::Service* service) {
  grpc::ServerBuilder builder;
  builder.AddListeningPort("unix://" + socket_path, grpc::InsecureServerCredentials());
  builder.RegisterService(service);
  auto server = builder.BuildAndStart();
  if (!server) throw std::runtime_error("cannot serve gRPC on unix://" + socket_path);
  return server;
}

void shut_down(std::unique_ptr<grpc::Server>& server) {
  // Handlers still sleeping see their context cancelled and return.
  server->Shutdown(std::chrono::system_clock::now() + std::chrono::milliseconds(100));
  server->Wait();
}

// Sleeps `delay` in small steps; stops early when the client has gone.
void sleep_unless_cancelled(grpc::ServerContext* context, std::chrono::milliseconds delay) {
  const auto end = std::chrono::steady_clock::now() + delay;
  while (std::chrono::steady_clock::now() < end && !context->IsCancelled()) {
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
}

int bound_unix_socket(const std::string& path) {
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  if (path.size() >= sizeof addr.sun_path) throw std::runtime_error("socket path too long: " + path);
  std::memcpy(addr.sun_path, path.c_str(), path.size() + 1);
  int fd = ::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) throw std::runtime_error("socket: " + std::string(std::strerror(errno)));
  if (::bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0) {
    ::close(fd);
    throw std::runtime_error("bind " + path + ": " + std::strerror(errno));
  }
  return fd;
}

}  // namespace

FakePodResources::FakePodResources(const std::string& socket_path) { server_ = serve(socket_path, this); }

FakePodResources::~FakePodResources() { shut_down(server_); }

v1::ListPodResourcesResponse one_container_listing(const std::string& pod_namespace, const std::string& pod_name,
                                                   const std::string& container, const std::string& device_id,
                                                   const std::string& resource) {
  v1::ListPodResourcesResponse r;
  auto* pod = r.add_pod_resources();
  pod->set_name(pod_name);
  pod->set_namespace_(pod_namespace);
  auto* c = pod->add_containers();
  c->set_name(container);
  auto* devices = c->add_devices();
  devices->set_resource_name(resource);
  devices->add_device_ids(device_id);
  return r;
}

void add_dra_claim_listing(v1::ListPodResourcesResponse& response, const std::string& pod_namespace,
                           const std::string& pod_name, const std::string& container, const std::string& claim_name,
                           const std::string& driver, const std::vector<std::string>& cdi_names) {
  auto* pod = response.add_pod_resources();
  pod->set_name(pod_name);
  pod->set_namespace_(pod_namespace);
  auto* c = pod->add_containers();
  c->set_name(container);
  auto* claim = c->add_dynamic_resources();
  claim->set_claim_name(claim_name);
  claim->set_claim_namespace(pod_namespace);
  auto* device = claim->add_claim_resources();
  device->set_driver_name(driver);
  device->set_pool_name("sandbox");
  device->set_device_name(claim_name + "-device");
  for (const auto& name : cdi_names) device->add_cdi_devices()->set_name(name);
}

void FakePodResources::set_response(v1::ListPodResourcesResponse response) {
  std::lock_guard lock(mu_);
  response_ = std::move(response);
}

void FakePodResources::set_status(grpc::Status status) {
  std::lock_guard lock(mu_);
  status_ = std::move(status);
}

grpc::Status FakePodResources::List(grpc::ServerContext* context, const v1::ListPodResourcesRequest*,
                                    v1::ListPodResourcesResponse* response) {
  ++list_calls_;
  sleep_unless_cancelled(context, delay_.load());
  std::lock_guard lock(mu_);
  if (!status_.ok()) return status_;
  *response = response_;
  return grpc::Status::OK;
}

FakeDevicePlugin::FakeDevicePlugin(const std::string& socket_path, std::chrono::milliseconds delay)
    : delay_(delay) {
  server_ = serve(socket_path, this);
}

FakeDevicePlugin::~FakeDevicePlugin() { shut_down(server_); }

grpc::Status FakeDevicePlugin::GetDevicePluginOptions(grpc::ServerContext* context, const v1beta1::Empty*,
                                                      v1beta1::DevicePluginOptions* response) {
  ++calls_;
  sleep_unless_cancelled(context, delay_);
  response->set_get_preferred_allocation_available(true);
  return grpc::Status::OK;
}

class MethodRecorder::Service final : public grpc::CallbackGenericService {
 public:
  grpc::ServerGenericBidiReactor* CreateReactor(grpc::GenericCallbackServerContext* context) override {
    {
      std::lock_guard lock(mu);
      methods.push_back(context->method());
    }
    return new Refuser();
  }

  std::mutex mu;
  std::vector<std::string> methods;

 private:
  class Refuser final : public grpc::ServerGenericBidiReactor {
   public:
    Refuser() { Finish(grpc::Status(grpc::StatusCode::UNIMPLEMENTED, "recorded")); }
    void OnDone() override { delete this; }
  };
};

MethodRecorder::MethodRecorder(const std::string& socket_path) : service_(std::make_unique<Service>()) {
  grpc::ServerBuilder builder;
  builder.AddListeningPort("unix://" + socket_path, grpc::InsecureServerCredentials());
  builder.RegisterCallbackGenericService(service_.get());
  server_ = builder.BuildAndStart();
  if (!server_) throw std::runtime_error("cannot serve gRPC on unix://" + socket_path);
}

MethodRecorder::~MethodRecorder() { shut_down(server_); }

std::vector<std::string> MethodRecorder::methods() {
  std::lock_guard lock(service_->mu);
  return service_->methods;
}

SilentSocket::SilentSocket(const std::string& path) : fd_(bound_unix_socket(path)) {
  if (::listen(fd_, 64) != 0) {
    ::close(fd_);
    throw std::runtime_error("listen " + path + ": " + std::strerror(errno));
  }
}

SilentSocket::~SilentSocket() { ::close(fd_); }

void make_stale_socket(const std::string& path) { ::close(bound_unix_socket(path)); }

void warm_up_grpc_client() {
  static const bool warmed = [] {
    TempDir dir("gdw-grpc-warm-up");
    const std::string socket = dir / "nobody.sock";
    make_stale_socket(socket);
    auto client = PodResourcesClient::create({socket, std::chrono::milliseconds(1000), std::chrono::milliseconds(0)});
    if (!client.ok() || !(*client)->start_list().ok()) return false;
    wait_readable((*client)->fd(), std::chrono::seconds(5));
    return (*client)->take().has_value();
  }();
  if (!warmed) throw std::runtime_error("warming up the gRPC client failed");
}

::testing::AssertionResult returns_at_once(const std::function<void()>& start) {
  rusage before_usage{}, after_usage{};
  ::getrusage(RUSAGE_THREAD, &before_usage);
  const auto before = std::chrono::steady_clock::now();
  start();
  const auto took =
      std::chrono::duration_cast<std::chrono::microseconds>(std::chrono::steady_clock::now() - before);
  ::getrusage(RUSAGE_THREAD, &after_usage);
  const long switches = (after_usage.ru_nivcsw - before_usage.ru_nivcsw) + (after_usage.ru_nvcsw - before_usage.ru_nvcsw);
  const auto budget = switches > 0 ? std::chrono::milliseconds(50) : std::chrono::milliseconds(5);
  if (took < budget) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure() << "the caller waited " << took.count() << " us (budget " << budget.count()
                                       << " ms, " << switches << " context switches)";
}

bool wait_readable(int fd, std::chrono::milliseconds timeout) {
  pollfd p{fd, POLLIN, 0};
  const auto end = std::chrono::steady_clock::now() + timeout;
  for (;;) {
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(end - std::chrono::steady_clock::now());
    const int rc = ::poll(&p, 1, static_cast<int>(std::max<std::int64_t>(left.count(), 0)));
    if (rc > 0) return true;
    if (rc == 0 || errno != EINTR) return false;
  }
}

bool readable_now(int fd) {
  pollfd p{fd, POLLIN, 0};
  return ::poll(&p, 1, 0) > 0;
}

}  // namespace gdw::test
