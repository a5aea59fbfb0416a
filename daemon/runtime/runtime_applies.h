// Runtime invocations applying a container's cgroup now (`runc create`, `runc update`, crun's
// the same), found without the probe: for `check --repair`, which must not grant inside such
// an apply either (runc reads the devices back after its create, and an old runc after its
// update; on cgroup v2 runc replaces the program it saw, and a swap in between makes that
// fail). The command line finds a create wherever the runtime's pid namespace is (the pid
// file's pid, runtime/create_runtime.h, is the runtime's own namespace's). A process counts only when the
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

struct ApplyTarget {
  std::string verb;          // "create" or "update"; "exit": a runtime still exiting
  std::string container_id;  // "" for "exit": its command line is gone with its memory
};
// The container a runtime's command line (/proc/<pid>/cmdline: NUL-separated arguments)
// creates or updates: its last argument, when an earlier one is the `create` or `update`
// subcommand and the last is no option. nullopt for any other invocation.
std::optional<ApplyTarget> parse_apply_target(std::string_view cmdline);

// A process's cgroup in one hierarchy from /proc/<pid>/cgroup: `controller` "" for the
// unified one ("0::/path"), else the v1 line whose controllers include it
// ("4:cpu,cpuacct:/path"). The path is relative to that hierarchy's root. nullopt when absent.
std::optional<std::string> parse_proc_cgroup(std::string_view text, std::string_view controller);

// Whether /proc/<pid>/stat (read after the last ')': the comm may hold anything) is of a
// process still exiting: not yet a zombie, or a zombie leader whose other threads are not
// all gone. A runtime's leader loses its command line as it exits, and its last thread
// leaves do_exit later.
bool parse_stat_still_exiting(std::string_view stat);

struct RuntimeApply {
  pid_t pid = 0;
  std::string comm;
  ApplyTarget target;
};

// Every runtime process under `proc_root` creating or updating a container now, or exiting
// (its command line gone, it may have been either: a container it applied to cannot be told),
// its cgroup (in the hierarchy of `controller`) outside the containers
// (`in_a_container(path)` false for it). Processes that vanish while read are skipped.
std::vector<RuntimeApply> runtime_applies_at_work(const std::string& proc_root, std::string_view controller,
                                                  const std::function<bool(const std::string&)>& in_a_container);

}  // namespace gdw
