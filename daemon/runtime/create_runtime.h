// The runtime still at work on a create whose pid file is written. runc and crun write the
// pid file (the container's first process) before they exit, and that process is the
// runtime's own child until then (runc makes its init with CLONE_PARENT, crun clones it);
// after the exit the shim, a subreaper, adopts it. So the first process's parent, while it
// is a runtime, is the create that has not ended: a grant waits for its exit. Nothing here
// depends on the container's own processes but the kernel's record of who is whose parent.
#pragma once

#include <sys/types.h>

#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace gdw {

// A pid file's text: one decimal pid (a newline or nothing after). nullopt otherwise.
std::optional<pid_t> parse_pid_file(std::string_view text);
// /proc/<pid>/stat's fields after the comm, which is in parentheses and may hold anything
// (spaces, ')'): split from the last ')'. [0] is proc(5)'s field 3 (state); empty when
// there is no ')'.
std::vector<std::string_view> stat_fields_after_comm(std::string_view stat);
// /proc/<pid>/stat's parent pid (its 4th field). nullopt when malformed.
std::optional<pid_t> parse_stat_parent(std::string_view stat);

struct CreateRuntime {
  pid_t pid = 0;
  std::string comm;  // from <proc_root>/<pid>/comm
};
// The parent of the process in `pid_file`, read from `proc_root` (the live /proc); nullopt
// when a file is missing or malformed (the process or its parent gone).
std::optional<CreateRuntime> read_create_runtime(const std::string& pid_file, const std::string& proc_root);
// read_create_runtime(), when that parent is a writer a grant waits for (runc, crun:
// writer_waited_for, core/apply_wait.h): the create has not ended. nullopt otherwise.
std::optional<CreateRuntime> create_runtime_at_work(const std::string& pid_file, const std::string& proc_root);

}  // namespace gdw
