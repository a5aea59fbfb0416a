// The trainer node's daemon (support/daemon_fixture.h) beside the stateful local API server
// (support/fake_apiserver.h), the daemon told it runs on kApiNode: what the tests of node
// conditions, readiness gates and the load on the API server share.
#pragma once

#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include <string>

#include "support/daemon_fixture.h"
#include "support/fake_apiserver.h"

namespace gdw::test {

inline constexpr const char* kApiNode = "gpu-node-1";

// `c`'s pod on kApiNode as the API server serves it: Running, its one container started,
// declaring the readiness gate when `gate`.
inline nlohmann::json running_pod_object(const SandboxContainer& c, bool gate) {
  using json = nlohmann::json;
  json p = {{"kind", "Pod"},
            {"metadata", {{"name", c.spec.pod_name}, {"namespace", c.spec.pod_namespace}, {"uid", c.spec.pod_uid}}},
            {"spec", {{"nodeName", kApiNode}, {"containers", json::array({{{"name", c.spec.container_name}}})}}},
            {"status",
             {{"phase", "Running"},
              {"containerStatuses", json::array({{{"name", c.spec.container_name}, {"started", true}}})}}}};
  if (gate) p["spec"]["readinessGates"] = json::array({{{"conditionType", "gpu-devwatch.io/devices-ready"}}});
  return p;
}

class DaemonWithApiServerTest : public DaemonWithTrainerTest {
 protected:
  void SetUp() override {
    DaemonWithTrainerTest::SetUp();
    if (!set_up()) return;
    if (!api_.running()) GTEST_SKIP() << "no local HTTPS server: " << api_.setup_error();
    daemon_->set_env({std::string("NODE_NAME=") + kApiNode});
  }
  // A node condition's status as the API server holds it ("" when absent).
  std::string status_of(const std::string& type) {
    auto c = api_.node_conditions();
    return c.count(type) ? c[type].value("status", "") : "";
  }
  // The readiness gate's status on `c`'s pod ("" when absent).
  std::string gate_of(const SandboxContainer& c) {
    auto g = api_.pod_condition(c.spec.pod_namespace, c.spec.pod_name);
    return g.is_object() ? g.value("status", "") : "";
  }
  FakeApiServer api_;
};

}  // namespace gdw::test
