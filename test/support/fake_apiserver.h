// A local HTTPS stand-in for the API server (fake_apiserver.py): events, the node and its
// status, this node's pods (list, watch) and their status, with a CA, server certificate
// (127.0.0.1) and ServiceAccount token made for the test, and knobs for the failures a
// real one shows (500 answers, 429/503 with Retry-After, hanging, dropped watches, 410
// Gone). Stateful: the PATCHes are applied to the objects it serves, once the
// ValidatingAdmissionPolicies of deploy/kubernetes/admission-policy.yaml admitted them, run
// as the API server runs them (admission.py): so every daemon test that writes a condition
// or a gate also shows that the shipped policies admit what the daemon writes.
#pragma once

#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "support/process.h"
#include "support/temp_dir.h"

namespace gdw::test {

struct RecordedRequest {
  std::string method;
  std::string path;
  std::string authorization;
  std::string content_type;
  std::string user_agent;
  double time = 0;      // when it arrived (seconds since the epoch)
  nlohmann::json body;  // null when the body is not JSON
};

// The node the ServiceAccount token is bound to (authentication.kubernetes.io/node-name),
// unless a test says otherwise: the node of the daemon's tests.
inline constexpr const char* kTokenNode = "gpu-node-1";

class FakeApiServer {
 public:
  // hang: accepts and completes TLS, never answers. token_node: the node the token's
  // claim names to admission ("" : a token without the claim, as a legacy token is).
  explicit FakeApiServer(bool hang = false, const std::string& token_node = kTokenNode);
  ~FakeApiServer();
  bool running() const { return port_ > 0; }
  std::string setup_error() const { return error_; }

  std::string url() const { return "https://127.0.0.1:" + std::to_string(port_); }
  const std::string& ca_file() const { return ca_; }
  const std::string& token_file() const { return token_file_; }
  // Another CA, which did not sign the server's certificate.
  std::string other_ca_file();
  // Replaces the token file as kubelet rotates projected tokens (new file, rename).
  void rotate_token(const std::string& token);
  std::vector<RecordedRequest> requests() const;
  // The daemon's configuration keys for this server (events on; conditions off unless
  // `conditions_extra` is given, which goes into a conditions: section turned on).
  std::string config_yaml(const std::string& events_extra = "", const std::string& conditions_extra = "") const;

  // "ok", "500" (every request answered 500), "429:N" / "503:N" (answered so, with
  // Retry-After: N) or "hang" (no answer until the mode changes).
  void set_mode(const std::string& mode);
  // The node's conditions as a previous run (or anyone) left them.
  void set_node_conditions(const nlohmann::json& conditions);
  // Pods (whole objects, with metadata.namespace, name, uid and spec.nodeName), as a
  // controller creates, updates and deletes them; each change is a watch event.
  void add_pod(const nlohmann::json& pod);
  void modify_pod(const nlohmann::json& pod);
  void delete_pod(const std::string& pod_namespace, const std::string& name);
  // Watches from a resourceVersion before now get 410 Gone (compact), open watches are cut
  // off (drop_watches).
  void compact();
  void drop_watches();
  // Pods added and deleted (namespace, name) while the open watches fall behind: they end
  // with an ERROR event, 410 Gone, in place of these changes and anything else they had
  // not sent, and resourceVersions before now are compacted. Only a new list shows them.
  struct MissedPodChanges {
    std::vector<nlohmann::json> added;
    std::vector<std::pair<std::string, std::string>> deleted;
  };
  void expire_watches(const MissedPodChanges& missed);
  // The node's conditions as merged from the PATCHes (type → condition); empty before any.
  std::map<std::string, nlohmann::json> node_conditions() const;
  // A pod's condition of `type` as merged from the PATCHes; null when absent.
  nlohmann::json pod_condition(const std::string& pod_namespace, const std::string& name,
                               const std::string& type = "gpu-devwatch.io/devices-ready") const;
  // The requests to `method` on paths starting with `prefix`.
  std::vector<RecordedRequest> requests_to(const std::string& method, const std::string& prefix) const;

 private:
  bool make_pki();
  void command(const nlohmann::json& c);

  TempDir dir_{"gdw-apiserver"};
  std::string ca_, token_file_, log_, state_;
  std::string error_;
  int port_ = 0;
  std::unique_ptr<BackgroundProcess> server_;
};

}  // namespace gdw::test
