#include <cstdio>
#include <string>

#include "service/daemon.h"

namespace gdw {
namespace {

constexpr const char* kRunUsage = R"(usage: gpu-devwatch run [--config PATH]

Runs the daemon: watches every GPU container's device cgroup and grants back, within a
millisecond, any allocated device node that something revoked; serves Prometheus metrics
at metrics.listen (/metrics). Logs to stderr, or to the journal with structured fields
when started by systemd (Type=notify: READY=1 after the first full pass, watchdog pings,
STOPPING=1). SIGHUP reloads the configuration (a bad file is refused and the running one
kept); SIGUSR1 re-reads everything now (a full resync); SIGTERM/SIGINT stop it.

options:
  --config PATH  configuration file (default: /etc/gpu-devwatch/gpu-devwatch.yaml if it
                 exists, else built-in defaults)

exit status: 0 stopped by a signal, 1 could not start, 2 bad configuration or arguments.
)";

}  // namespace

int run_daemon_command(int argc, char** argv) {
  std::string config_path;
  for (int i = 2; i < argc; ++i) {
    std::string a = argv[i];
    if (a == "--help" || a == "-h") {
      std::fputs(kRunUsage, stdout);
      return 0;
    }
    if (a == "--config" && i + 1 < argc) {
      config_path = argv[++i];
    } else if (a.rfind("--config=", 0) == 0) {
      config_path = a.substr(9);
    } else {
      std::fprintf(stderr, "gpu-devwatch run: unknown option '%s'\n\n%s", a.c_str(), kRunUsage);
      return 2;
    }
  }
  return run_daemon(config_path);
}

}  // namespace gdw
