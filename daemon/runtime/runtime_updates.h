// Runtime invocations updating a container now (`runc update`, `crun update`), found without
// the probe: for `check --repair`, which must not grant inside an update's apply either (an
// old runc re-applies the devices and reads them back; on cgroup v2 runc replaces the
// program it saw, and a swap in between makes that fail). A process counts only when the
// kernel's records say it is a runtime outside every container: its name is a runtime's
// (writer_waited_for, core/apply_wait.h) and its cgroup is no container's (a tenant can
// call a process anything and give it any arguments, never leave its container's cgroup).
// Its arguments, set by whoever ran it outside the containers, name the container.
#pragma once

#include <sys/types.h>

#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace gdw {

// The container a runtime's command line (/proc/<pid>/cmdline: NUL-separated arguments)
// updates: its last argument, when an earlier one is the `update` subcommand and the last
// is no option. nullopt for any other invocation.
std::optional<std::string> parse_update_target(std::string_view cmdline);

// A process's cgroup in one hierarchy from /proc/<pid>/cgroup: `controller` "" for the
// unified one ("0::/path"), else the v1 line whose controllers include it
// ("4:cpu,cpuacct:/path"). The path is relative to that hierarchy's root. nullopt when absent.
std::optional<std::string> parse_proc_cgroup(std::string_view text, std::string_view controller);

struct RuntimeUpdate {
  pid_t pid = 0;
  std::string comm;
  std::string container_id;
};

// Every runtime process under `proc_root` updating a container now, its cgroup (in the
// hierarchy of `controller`) outside the containers (`in_a_container(path)` false for it).
// Processes that vanish while read are skipped.
std::vector<RuntimeUpdate> runtime_updates_at_work(const std::string& proc_root, std::string_view controller,
                                                   const std::function<bool(const std::string&)>& in_a_container);

}  // namespace gdw
