// Pinning for the bench's cross-CPU mode: the tenant (the bench and the spinners it forks)
// on one CPU, the daemon on another, as on a many-core GPU node, where a tenant keeps its
// CPU while the daemon repairs on an idle one. Without it, on a 2-CPU VM the daemon often
// takes the tenant's own CPU (the wake-up is made inside the tenant's attach), so a
// reaction there mostly measures whether the tenant got its CPU back before the repair.
#pragma once

#include <dirent.h>
#include <sched.h>
#include <sys/types.h>
#include <unistd.h>

#include <cstdlib>
#include <string>

namespace gdw::bench {

inline int last_cpu() {
  const long n = ::sysconf(_SC_NPROCESSORS_ONLN);
  return n > 1 ? static_cast<int>(n - 1) : 0;
}

// One thread (0: the caller); false when the kernel refused.
inline bool pin_thread(pid_t tid, int cpu) {
  cpu_set_t set;
  CPU_ZERO(&set);
  CPU_SET(cpu, &set);
  return ::sched_setaffinity(tid, sizeof set, &set) == 0;
}

// Every thread a process has now (threads it starts later inherit their creator's).
inline bool pin_process(pid_t pid, int cpu) {
  const std::string tasks = "/proc/" + std::to_string(pid) + "/task";
  DIR* dir = ::opendir(tasks.c_str());
  if (!dir) return false;
  bool all = true;
  while (const dirent* e = ::readdir(dir)) {
    if (e->d_name[0] == '.') continue;
    all &= pin_thread(static_cast<pid_t>(std::atoi(e->d_name)), cpu);
  }
  ::closedir(dir);
  return all;
}

}  // namespace gdw::bench
