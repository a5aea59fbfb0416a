#include "app/cli.h"

#include <algorithm>
#include <array>
#include <cstdio>
#include <vector>

#include "app/check_command.h"
#include "app/malloc_tuning.h"
#include "build_info.h"
#include "nvidia/nvml.h"
#include "service/daemon.h"

namespace gdw {
namespace {

constexpr Flag kConfigFlag{"--config", "PATH",
                           "configuration file (default: /etc/gpu-devwatch/gpu-devwatch.yaml if it\n"
                           "exists, else built-in defaults)"};

constexpr Flag kCheckFlags[] = {
    kConfigFlag,
    {"--json", "", "print a JSON document instead of a table"},
    {"--repair", "",
     "grant the missing devices (one 'c M:m rw' rule each to devices.allow);\n"
     "refused in observe mode. Never grants more than the allocation, never\n"
     "revokes, never touches containers without GPUs."},
};
constexpr Flag kRunFlags[] = {kConfigFlag};
constexpr Flag kNvmlQueryFlags[] = {{"--library", "PATH", "the NVML library to load (default: libnvidia-ml.so.1)"}};

struct Command {
  std::string_view name;
  std::string_view summary;  // for the command list; empty: internal, not listed
  std::span<const Flag> flags;
  std::string_view about;     // --help: after the usage line
  std::string_view epilogue;  // --help: after the options
  int (*run)(const ParsedArgs&);
};

int run_check_command(const ParsedArgs& a) {
  return run_check(CheckOptions{a.value("--config"), a.has("--json"), a.has("--repair")});
}
int run_daemon_command(const ParsedArgs& a) {
  tune_malloc_for_daemon();
  return run_daemon(a.value("--config"));
}
int run_version_command(const ParsedArgs&) {
  std::printf("gpu-devwatch %s (%s)\n", GDW_VERSION, GDW_GIT_REVISION);
  return 0;
}
// The child process that talks to NVML (nvidia/nvml_process.cpp starts it).
int run_nvml_query_command(const ParsedArgs& a) { return nvml_query_main(a.value("--library", "libnvidia-ml.so.1")); }

const Command kCommands[] = {
    {"check", "show, for every GPU container, the devices it must have and what is missing", kCheckFlags,
     R"(For every container that kubelet allocated a GPU to, lists the device nodes it must be
able to open (its GPUs, MIG capabilities, DeviceSpecs and the NVIDIA control nodes), which
of them its device cgroup allows, and what is missing.
)",
     R"(It also reports the node faults beside drift: what kubelet's PodResources API says and
where it disagrees with the checkpoint, whether the checkpoint describes this host (boot id,
GPU UUIDs after a reboot onto other hardware), and whether each registered device plugin
answers GetDevicePluginOptions within kubelet.plugin_probe_timeout.

exit status: 0 nothing missing and the node healthy; 1 something missing, a GPU pod's
container could not be checked, the checkpoint is stale or a device plugin does not answer
(PodResources disagreements are reported but do not change it); 2 error (bad
configuration, kubepods or checkpoint not readable).
)",
     run_check_command},
    {"run", "the daemon: watch and repair continuously, serve metrics", kRunFlags,
     R"(Runs the daemon: watches every GPU container's device cgroup and grants back, within a
millisecond, any allocated device node that something revoked; serves Prometheus metrics
at metrics.listen (/metrics). Logs to stderr, or to the journal with structured fields
when started by systemd (Type=notify: READY=1 after the first full pass, watchdog pings,
STOPPING=1). SIGHUP reloads the configuration (a bad file is refused and the running one
kept); SIGUSR1 re-reads everything now (a full resync); SIGTERM/SIGINT stop it.
)",
     "exit status: 0 stopped by a signal, 1 could not start, 2 bad configuration or arguments.\n",
     run_daemon_command},
    {"version", "print the version", {}, "prints the version and git revision.\n", "", run_version_command},
    {"nvml-query", "", kNvmlQueryFlags, "", "", run_nvml_query_command},
};

constexpr std::size_t kCommandColumn = 12;  // where a command's summary starts in the list

std::string top_usage() {
  std::string s = R"(usage: gpu-devwatch <command> [options]

Keeps the GPU device nodes that kubelet allocated to each container allowed in the
container's device cgroup, repairs them when something revokes them, and reports.

commands:
)";
  for (const Command& c : kCommands) {
    if (c.summary.empty()) continue;
    std::string line = "  " + std::string(c.name);
    line.resize(std::max(kCommandColumn, line.size() + 1), ' ');
    s += line + std::string(c.summary) + "\n";
  }
  return s + "\n'gpu-devwatch <command> --help' describes a command's options.\n";
}

std::string command_usage(const Command& c) {
  std::string s = "usage: gpu-devwatch " + std::string(c.name);
  if (auto synopsis = flags_synopsis(c.flags); !synopsis.empty()) s += " " + synopsis;
  s += "\n";
  if (!c.about.empty()) s += "\n" + std::string(c.about);
  if (!c.flags.empty()) s += "\noptions:\n" + flags_help(c.flags);
  if (!c.epilogue.empty()) s += "\n" + std::string(c.epilogue);
  return s;
}

const Command* find_command(std::string_view name) {
  auto it = std::find_if(std::begin(kCommands), std::end(kCommands), [&](const Command& c) { return c.name == name; });
  return it == std::end(kCommands) ? nullptr : &*it;
}

CliAction print(int exit_code, std::string out, std::string err = {}) {
  CliAction a;
  a.exit_code = exit_code;
  a.out = std::move(out);
  a.err = std::move(err);
  return a;
}

}  // namespace

CliAction resolve_cli(std::span<const std::string> args) {
  if (args.empty()) return print(2, "", top_usage());
  const std::string& name = args.front();
  if (name == "--help" || name == "-h" || name == "help") return print(0, top_usage());
  // `gpu-devwatch --version`, as most programs spell it (the image test runs it): the
  // version command, which takes no options.
  if (name == "--version" && args.size() == 1) return resolve_cli(std::array<std::string, 1>{"version"});
  const Command* command = find_command(name);
  if (!command) return print(2, "", "gpu-devwatch: unknown command '" + name + "'\n\n" + top_usage());
  auto parsed = parse_args(args.subspan(1), command->flags);
  if (!parsed) {
    return print(2, "", "gpu-devwatch " + name + ": " + parsed.error().message + "\n\n" + command_usage(*command));
  }
  if (parsed->help) return print(0, command_usage(*command));
  CliAction a;
  a.command = name;
  a.args = std::move(*parsed);
  return a;
}

int cli_main(int argc, char** argv) {
  const std::vector<std::string> args(argv + std::min(argc, 1), argv + argc);
  const CliAction action = resolve_cli(args);
  if (action.command.empty()) {
    std::fputs(action.out.c_str(), stdout);
    std::fputs(action.err.c_str(), stderr);
    return action.exit_code;
  }
  return find_command(action.command)->run(action.args);
}

}  // namespace gdw
