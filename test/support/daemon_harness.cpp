#include "support/daemon_harness.h"

#include <signal.h>

namespace gdw::test {

bool DaemonHarness::start(const std::string& extra, bool probe, const std::string& kubelet_extra,
                          const std::string& probe_extra) {
  config_ = node_.write_config("metrics:\n  listen: 127.0.0.1:" + std::to_string(port_) + "\nprobe:\n  enabled: " +
                                   (probe ? "true" : "false") + "\n" + probe_extra + "log:\n  level: debug\n" + extra,
                               kubelet_extra);
  return launch();
}

bool DaemonHarness::start_with_defaults() {
  config_ = node_.write_config("metrics:\n  listen: 127.0.0.1:" + std::to_string(port_) + "\n");
  return launch();
}

bool DaemonHarness::launch() {
  daemon_ = std::make_unique<BackgroundProcess>(std::vector<std::string>{GDW_BINARY, "run", "--config", config_}, env_);
  if (!daemon_->wait_for_output(" ready", 15s)) return false;
  return eventually([&] { return !metrics().empty(); }, 5s);
}

int DaemonHarness::stop() {
  if (!daemon_ || !daemon_->running()) return daemon_ ? daemon_->wait(0s) : 0;
  daemon_->signal(SIGTERM);
  return daemon_->wait(10s);
}

}  // namespace gdw::test
