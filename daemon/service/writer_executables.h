// The executable of each process that writes rules or loads device programs, read once per
// process: a re-apply storm is one runc writing hundreds of rules, and each
// readlink(/proc/<pid>/exe) walks /proc again. A process is its pid and its start time, so
// a reused pid is a new process and is read afresh.
#pragma once

#include <cstddef>
#include <cstdint>
#include <deque>
#include <string>

#include "probe/probe.h"

namespace gdw {

class WriterExecutables {
 public:
  explicit WriterExecutables(std::size_t capacity = 64) : capacity_(capacity) {}

  // readlink of <proc_root>/<pid>/exe; empty when the process is gone (never kept then).
  std::string of(const ProcessInfo& p, const std::string& proc_root = "/proc");

 private:
  struct Entry {
    pid_t pid;
    std::uint64_t start_time_ns;
    std::string exe;
  };
  std::size_t capacity_;
  std::deque<Entry> entries_;  // the most recently read last
};

}  // namespace gdw
