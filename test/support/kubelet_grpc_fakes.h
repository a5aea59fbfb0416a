// Stand-ins for the gRPC servers gpu-devwatch calls on a node: kubelet's PodResources API and
// a device plugin, served on unix sockets from the generated server code, with knobs for
// the failures a real node shows (slow answers, throttling); plus sockets that never speak
// and sockets nobody listens on.
#pragma once

#include <grpcpp/grpcpp.h>
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "deviceplugin_service.grpc.pb.h"
#include "podresources_v1.grpc.pb.h"

namespace gdw::test {

// v1.PodResourcesLister on unix://<socket_path>; List answers with the configured pods.
class FakePodResources final : public v1::PodResourcesLister::Service {
 public:
  explicit FakePodResources(const std::string& socket_path);
  ~FakePodResources() override;

  void set_response(v1::ListPodResourcesResponse response);
  // List waits this long (or until the client gives up) before answering.
  void set_delay(std::chrono::milliseconds delay) { delay_ = delay; }
  // List answers with this status instead of the pods (OK: the pods).
  void set_status(grpc::Status status);
  int list_calls() const { return list_calls_; }

  grpc::Status List(grpc::ServerContext* context, const v1::ListPodResourcesRequest* request,
                    v1::ListPodResourcesResponse* response) override;

 private:
  std::mutex mu_;
  v1::ListPodResourcesResponse response_;
  grpc::Status status_ = grpc::Status::OK;
  std::atomic<std::chrono::milliseconds> delay_{std::chrono::milliseconds(0)};
  std::atomic<int> list_calls_{0};
  std::unique_ptr<grpc::Server> server_;
};

// A List answer with one pod holding one container with one device of `resource`.
v1::ListPodResourcesResponse one_container_listing(const std::string& pod_namespace, const std::string& pod_name,
                                                   const std::string& container, const std::string& device_id,
                                                   const std::string& resource = "nvidia.com/gpu");

// Appends a pod with one container using one DRA claim (in the pod's namespace) of `driver`
// whose device has `cdi_names` (dynamic_resources, as kubelet >= 1.34 lists it).
void add_dra_claim_listing(v1::ListPodResourcesResponse& response, const std::string& pod_namespace,
                           const std::string& pod_name, const std::string& container, const std::string& claim_name,
                           const std::string& driver, const std::vector<std::string>& cdi_names);

// v1beta1.DevicePlugin on unix://<socket_path>; GetDevicePluginOptions answers after `delay`.
class FakeDevicePlugin final : public v1beta1::DevicePlugin::Service {
 public:
  explicit FakeDevicePlugin(const std::string& socket_path,
                            std::chrono::milliseconds delay = std::chrono::milliseconds(0));
  ~FakeDevicePlugin() override;
  int calls() const { return calls_; }

  grpc::Status GetDevicePluginOptions(grpc::ServerContext* context, const v1beta1::Empty* request,
                                      v1beta1::DevicePluginOptions* response) override;

 private:
  std::chrono::milliseconds delay_;
  std::atomic<int> calls_{0};
  std::unique_ptr<grpc::Server> server_;
};

// Any gRPC method: records the method path the client asked for, answers UNIMPLEMENTED.
class MethodRecorder {
 public:
  explicit MethodRecorder(const std::string& socket_path);
  ~MethodRecorder();
  std::vector<std::string> methods();

 private:
  class Service;
  std::unique_ptr<Service> service_;
  std::unique_ptr<grpc::Server> server_;
};

// A socket that accepts connections (the kernel's backlog does) and never says a word: a
// hung server, as far as the client can tell.
class SilentSocket {
 public:
  explicit SilentSocket(const std::string& path);
  ~SilentSocket();
  SilentSocket(const SilentSocket&) = delete;
  SilentSocket& operator=(const SilentSocket&) = delete;

 private:
  int fd_ = -1;
};

// Leaves a socket file nobody listens on (a plugin that died without cleaning up):
// connecting is refused.
void make_stale_socket(const std::string& path);

// Makes one failing client call (to a socket nobody listens on) the first time it is called
// in a process. gRPC starts its client machinery (threads, completion queues) on the first
// call of the process; the daemon pays that once at startup, and tests that time a call's
// start should not count it.
void warm_up_grpc_client();

// Runs `start` (a call that must not wait for any server) and judges how long the caller
// waited: under 5 ms. When the calling thread was switched out meanwhile (preempted, or
// briefly waiting for a gRPC-internal lock whose holder was preempted: ctest -j on a
// loaded 2-core machine), the wall time says more about the machine than the code, and
// 50 ms is allowed: still far below every deadline (200 ms and more) and server delay in
// these tests, so a start that waited for a server fails either way.
::testing::AssertionResult returns_at_once(const std::function<void()>& start);

// Waits for `fd` to become readable; false after `timeout`.
bool wait_readable(int fd, std::chrono::milliseconds timeout);
// Whether `fd` is readable right now.
bool readable_now(int fd);

}  // namespace gdw::test
