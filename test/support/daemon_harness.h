// Runs the real gpu-devwatch daemon against a SandboxNode for privileged tests.
#pragma once

#include <cerrno>
#include <map>
#include <memory>
#include <string>

#include "support/metrics_text.h"
#include "support/process.h"
#include "support/sandbox_node.h"

namespace gdw::test {

class DaemonHarness {
 public:
  explicit DaemonHarness(SandboxNode& node) : node_(node), port_(free_port()) {}
  ~DaemonHarness() { stop(); }

  // Writes a config (metrics on a free loopback port, the probe on when `probe`, debug
  // logs, then `extra`; `probe_extra`: more keys of the probe section, e.g.
  // "  syscall_hook: always\n") and starts `gpu-devwatch run`; waits for "ready".
  bool start(const std::string& extra = "", bool probe = false, const std::string& kubelet_extra = "",
             const std::string& probe_extra = "");
  // The default configuration a user runs (probe on, info logs): only the node's paths and
  // the metrics port set. For the benches.
  bool start_with_defaults();
  // More "K=V" environment entries for the daemons started after this (NODE_NAME=...).
  void set_env(std::vector<std::string> env) { env_ = std::move(env); }
  // SIGTERM and wait; returns the exit code.
  int stop();

  BackgroundProcess& process() { return *daemon_; }
  std::string output() const { return daemon_ ? daemon_->output() : std::string(); }
  std::string metrics() const { return http_get(port_); }
  double metric(const std::string& name, const std::map<std::string, std::string>& labels = {}) const {
    return metric_value(metrics(), name, labels).value_or(-1);
  }
  // Polls until a counter reaches `at_least`. What a grant moves is counted just after the
  // grant the tenant sees, and the HTTP thread can serve a scrape in between.
  bool eventually_metric_at_least(const std::string& name, double at_least,
                                  const std::map<std::string, std::string>& labels = {},
                                  std::chrono::milliseconds timeout = 3s) const {
    return eventually([&] { return metric(name, labels) >= at_least; }, timeout);
  }
  const std::string& config_path() const { return config_; }
  int port() const { return port_; }

  // Polls until a process in the container's cgroup gets `want` opening the node.
  bool eventually_errno(const SandboxContainer& c, const std::string& node_name, int want,
                        std::chrono::milliseconds timeout = 3s) {
    return eventually([&] { return node_.open_errno(c, node_name) == want; }, timeout);
  }

 private:
  bool launch();

  SandboxNode& node_;
  int port_;
  std::string config_;
  std::vector<std::string> env_;
  std::unique_ptr<BackgroundProcess> daemon_;
};

}  // namespace gdw::test
