#include "support/process_usage.h"

#include <dirent.h>
#include <unistd.h>

#include <algorithm>
#include <fstream>

namespace gdw::test {

std::vector<std::string> open_fd_targets(pid_t pid) {
  std::vector<std::string> targets;
  const std::string dir = "/proc/" + std::to_string(pid) + "/fd";
  DIR* d = ::opendir(dir.c_str());
  if (d == nullptr) return targets;
  while (dirent* e = ::readdir(d)) {
    if (e->d_name[0] == '.') continue;
    char target[4096];
    const ssize_t len = ::readlink((dir + "/" + e->d_name).c_str(), target, sizeof target - 1);
    targets.emplace_back(target, len > 0 ? static_cast<std::size_t>(len) : 0);
  }
  ::closedir(d);
  return targets;
}

std::size_t bpf_program_fds(const std::vector<std::string>& targets) {
  return static_cast<std::size_t>(
      std::count(targets.begin(), targets.end(), std::string("anon_inode:bpf-prog")));
}

long rss_anon_kib(pid_t pid) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/status");
  std::string key;
  long value = 0;
  while (in >> key) {
    if (key == "RssAnon:") {
      in >> value;
      return value;
    }
    in.ignore(1 << 12, '\n');
  }
  return -1;
}

}  // namespace gdw::test
