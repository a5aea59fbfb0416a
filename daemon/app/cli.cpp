#include "app/cli.h"

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "app/check_command.h"
#include "node/config_file.h"
#include "build_info.h"
#include "nvidia/nvml.h"

namespace gdw {
namespace {

constexpr const char* kUsage = R"(usage: gpu-devwatch <command> [options]

Keeps the GPU device nodes that kubelet allocated to each container allowed in the
container's device cgroup, repairs them when something revokes them, and reports.

commands:
  check     show, for every GPU container, the devices it must have and what is missing
  run       the daemon: watch and repair continuously, serve metrics
  version   print the version

'gpu-devwatch <command> --help' describes a command's options.
)";

constexpr const char* kCheckUsage = R"(usage: gpu-devwatch check [--config PATH] [--json] [--repair]

For every container that kubelet allocated a GPU to, lists the device nodes it must be
able to open (its GPUs, MIG capabilities, DeviceSpecs and the NVIDIA control nodes), which
of them its device cgroup allows, and what is missing.

options:
  --config PATH  configuration file (default: /etc/gpu-devwatch/gpu-devwatch.yaml if it
                 exists, else built-in defaults)
  --json         print a JSON document instead of a table
  --repair       grant the missing devices (one 'c M:m rw' rule each to devices.allow);
                 refused in observe mode. Never grants more than the allocation, never
                 revokes, never touches containers without GPUs.

It also reports the node faults beside drift: what kubelet's PodResources API says and
where it disagrees with the checkpoint, whether the checkpoint describes this host (boot id,
GPU UUIDs after a reboot onto other hardware), and whether each registered device plugin
answers GetDevicePluginOptions within kubelet.plugin_probe_timeout.

exit status: 0 nothing missing and the node healthy; 1 something missing, a GPU pod's
container could not be checked, the checkpoint is stale or a device plugin does not answer
(PodResources disagreements are reported but do not change it); 2 error (bad
configuration, kubepods or checkpoint not readable).
)";

constexpr const char* kVersionUsage = "usage: gpu-devwatch version\n\nprints the version and git revision.\n";

bool is_help(const std::string& a) { return a == "--help" || a == "-h" || a == "help"; }

// Parses "--flag" and "--key VALUE" / "--key=VALUE" options. Unknown ones are errors.
struct Args {
  std::vector<std::string> flags;
  std::vector<std::pair<std::string, std::string>> values;
  std::string error;
};

Args parse_args(int argc, char** argv, int start, const std::vector<std::string>& flag_names,
                const std::vector<std::string>& value_names) {
  Args out;
  for (int i = start; i < argc; ++i) {
    std::string a = argv[i];
    std::string key = a, value;
    bool has_value = false;
    if (auto eq = a.find('='); a.rfind("--", 0) == 0 && eq != std::string::npos) {
      key = a.substr(0, eq);
      value = a.substr(eq + 1);
      has_value = true;
    }
    if (std::find(flag_names.begin(), flag_names.end(), key) != flag_names.end() && !has_value) {
      out.flags.push_back(key);
    } else if (std::find(value_names.begin(), value_names.end(), key) != value_names.end()) {
      if (!has_value) {
        if (i + 1 >= argc) {
          out.error = key + " needs a value";
          return out;
        }
        value = argv[++i];
      }
      out.values.emplace_back(key, value);
    } else {
      out.error = "unknown option '" + a + "'";
      return out;
    }
  }
  return out;
}

bool has_flag(const Args& a, const std::string& f) {
  return std::find(a.flags.begin(), a.flags.end(), f) != a.flags.end();
}

std::string value_of(const Args& a, const std::string& k) {
  std::string v;
  for (const auto& [key, value] : a.values)
    if (key == k) v = value;
  return v;
}

int usage_error(const char* command, const std::string& error, const char* usage) {
  std::fprintf(stderr, "gpu-devwatch %s: %s\n\n%s", command, error.c_str(), usage);
  return 2;
}

}  // namespace

int run_daemon_command(int argc, char** argv);  // app/run_command.cpp

int cli_main(int argc, char** argv) {
  if (argc < 2) {
    std::fputs(kUsage, stderr);
    return 2;
  }
  const std::string cmd = argv[1];
  const bool help = argc > 2 && is_help(argv[2]);
  if (is_help(cmd)) {
    std::fputs(kUsage, stdout);
    return 0;
  }
  if (cmd == "version") {
    if (help) {
      std::fputs(kVersionUsage, stdout);
      return 0;
    }
    std::printf("gpu-devwatch %s (%s)\n", GDW_VERSION, GDW_GIT_REVISION);
    return 0;
  }
  if (cmd == "check") {
    if (help) {
      std::fputs(kCheckUsage, stdout);
      return 0;
    }
    Args args = parse_args(argc, argv, 2, {"--json", "--repair"}, {"--config"});
    if (!args.error.empty()) return usage_error("check", args.error, kCheckUsage);
    return run_check(CheckOptions{value_of(args, "--config"), has_flag(args, "--json"), has_flag(args, "--repair")});
  }
  if (cmd == "run") return run_daemon_command(argc, argv);
  if (cmd == "nvml-query") {  // internal: the child process that talks to NVML
    Args args = parse_args(argc, argv, 2, {}, {"--library"});
    if (!args.error.empty()) return usage_error("nvml-query", args.error, "usage: gpu-devwatch nvml-query --library PATH\n");
    std::string library = value_of(args, "--library");
    return nvml_query_main(library.empty() ? "libnvidia-ml.so.1" : library);
  }
  std::fprintf(stderr, "gpu-devwatch: unknown command '%s'\n\n%s", cmd.c_str(), kUsage);
  return 2;
}

}  // namespace gdw
