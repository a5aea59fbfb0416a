// What a process (the daemon) holds, read from /proc: for tests that assert nothing grows.
#pragma once

#include <sys/types.h>

#include <cstddef>
#include <cstdint>
#include <map>
#include <set>
#include <string>
#include <vector>

namespace gdw::test {

// The targets of its open descriptors (readlink of /proc/<pid>/fd/*), e.g.
// "anon_inode:bpf-prog", "/sys/fs/cgroup/unified/…", "socket:[123]".
std::vector<std::string> open_fd_targets(pid_t pid);
// The targets by kind, counted: sockets and pipes without their inode, paths below
// `cgroup_root` as "cgroup", anything else as it is ("anon_inode:bpf-prog", "/dev/null").
std::map<std::string, int> fd_kinds(const std::vector<std::string>& targets, const std::string& cgroup_root);
// "+2 cgroup, -1 socket": what `after` holds more or less than `before`.
std::string fd_kind_changes(const std::map<std::string, int>& before, const std::map<std::string, int>& after);
// How many of those are "anon_inode:bpf-prog" (a loaded program kept alive by the process).
std::size_t bpf_program_fds(const std::vector<std::string>& targets);
// The ids of the programs of `prog_type` its descriptors hold (the "prog_type:" and
// "prog_id:" lines of /proc/<pid>/fdinfo/<fd>; BPF_PROG_TYPE_CGROUP_DEVICE is 15).
std::set<std::uint32_t> program_ids_held(pid_t pid, unsigned prog_type);
// Anonymous memory (heap, stacks) in KiB, RssAnon of /proc/<pid>/status: what a leak grows
// (file pages are not: a process maps its code back in as it runs); -1 if unreadable.
long rss_anon_kib(pid_t pid);

}  // namespace gdw::test
