// DaemonTest for tests that serve kubelet's PodResources API over real gRPC (link
// gdw_test_kubelet_grpc): the gRPC client is warmed up before the node exists.
#pragma once

#include <chrono>
#include <thread>

#include "support/daemon_fixture.h"
#include "support/kubelet_grpc_fakes.h"

namespace gdw::test {

class DaemonWithPodResourcesTest : public DaemonTest {
 protected:
  void SetUp() override {
    if (SandboxNode::available()) warm_up_grpc_client();
    DaemonTest::SetUp();
  }
  // Several PodResources answers after the one that made a grant: whatever the daemon
  // would do with them it has done.
  static void let_pod_resources_settle(const FakePodResources& kubelet) {
    const int calls = kubelet.list_calls();
    EXPECT_TRUE(eventually([&] { return kubelet.list_calls() >= calls + 3; }, std::chrono::seconds(5)));
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
};

}  // namespace gdw::test
