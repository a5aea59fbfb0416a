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

std::map<std::string, int> fd_kinds(const std::vector<std::string>& targets, const std::string& cgroup_root) {
  std::map<std::string, int> kinds;
  for (const auto& t : targets) {
    if (t.rfind("socket:", 0) == 0) {
      ++kinds["socket"];
    } else if (t.rfind("pipe:", 0) == 0) {
      ++kinds["pipe"];
    } else if (!cgroup_root.empty() && t.rfind(cgroup_root, 0) == 0) {
      ++kinds["cgroup"];
    } else {
      ++kinds[t];
    }
  }
  return kinds;
}

std::string fd_kind_changes(const std::map<std::string, int>& before, const std::map<std::string, int>& after) {
  std::map<std::string, int> delta;
  for (const auto& [kind, n] : after) delta[kind] += n;
  for (const auto& [kind, n] : before) delta[kind] -= n;
  std::string text;
  for (const auto& [kind, n] : delta) {
    if (n == 0) continue;
    text += (text.empty() ? "" : ", ") + std::string(n > 0 ? "+" : "") + std::to_string(n) + " " + kind;
  }
  return text.empty() ? "none" : text;
}

std::size_t bpf_program_fds(const std::vector<std::string>& targets) {
  return static_cast<std::size_t>(std::count(targets.begin(), targets.end(), std::string("anon_inode:bpf-prog")));
}

std::set<std::uint32_t> program_ids_held(pid_t pid, unsigned prog_type) {
  std::set<std::uint32_t> ids;
  const std::string dir = "/proc/" + std::to_string(pid) + "/fdinfo";
  DIR* d = ::opendir(dir.c_str());
  if (d == nullptr) return ids;
  while (dirent* e = ::readdir(d)) {
    if (e->d_name[0] == '.') continue;
    std::ifstream in(dir + "/" + e->d_name);
    std::string key;
    unsigned type = ~0u;
    std::uint32_t id = 0;
    while (in >> key) {
      if (key == "prog_type:") in >> type;
      else if (key == "prog_id:") in >> id;
      in.ignore(1 << 12, '\n');
    }
    if (type == prog_type && id != 0) ids.insert(id);
  }
  ::closedir(d);
  return ids;
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
