#include "runtime/runtime_applies.h"

#include <dirent.h>

#include <charconv>
#include <memory>

#include "core/apply_wait.h"
#include "core/writer_name.h"
#include "runtime/create_runtime.h"
#include "hostfs/bounded_file.h"

namespace gdw {
namespace {

// runc's and crun's command lines are a few hundred bytes; a longer one is no apply of theirs.
constexpr std::size_t kCmdlineMax = 16 * 1024;
// /proc/<pid>/cgroup: a line per v1 hierarchy, each path at most a few hundred bytes.
constexpr std::size_t kCgroupFileMax = 64 * 1024;

std::vector<std::string_view> split(std::string_view text, char sep) {
  std::vector<std::string_view> parts;
  while (!text.empty()) {
    const auto end = text.find(sep);
    parts.push_back(text.substr(0, end));
    if (end == std::string_view::npos) break;
    text.remove_prefix(end + 1);
  }
  return parts;
}

std::optional<std::string> read_proc_file(const std::string& path, std::size_t max_bytes) {
  auto text = read_bounded_file(path, {.max_bytes = max_bytes, .nonblocking = true, .regular_only = false});
  if (!text) return std::nullopt;
  return std::move(*text);
}

}  // namespace

std::optional<ApplyTarget> parse_apply_target(std::string_view cmdline) {
  if (!cmdline.empty() && cmdline.back() == '\0') cmdline.remove_suffix(1);
  const auto args = split(cmdline, '\0');
  if (args.size() < 3) return std::nullopt;  // the program, the subcommand, the container at least
  const std::string_view last = args.back();
  if (last.empty() || last.front() == '-') return std::nullopt;
  for (std::size_t i = 1; i + 1 < args.size(); ++i)
    if (args[i] == "create" || args[i] == "update") return ApplyTarget{std::string(args[i]), std::string(last)};
  return std::nullopt;
}

bool parse_stat_still_exiting(std::string_view stat) {
  const auto fields = stat_fields_after_comm(stat);
  // Fields 3 (state) and 20 (num_threads) of proc(5): the 1st and 18th after the comm.
  if (fields.size() < 18) return false;
  if (fields[0] != "Z") return true;
  long threads = 0;
  const auto [end, ec] = std::from_chars(fields[17].data(), fields[17].data() + fields[17].size(), threads);
  return ec == std::errc() && end == fields[17].data() + fields[17].size() && threads > 1;
}

std::optional<std::string> parse_proc_cgroup(std::string_view text, std::string_view controller) {
  for (std::string_view line : split(text, '\n')) {
    // "<hierarchy id>:<controllers>:<path>"; the path may hold colons itself.
    const auto first = line.find(':');
    if (first == std::string_view::npos) continue;
    const auto second = line.find(':', first + 1);
    if (second == std::string_view::npos) continue;
    const std::string_view id = line.substr(0, first);
    const std::string_view controllers = line.substr(first + 1, second - first - 1);
    const std::string_view path = line.substr(second + 1);
    if (path.empty() || path.front() != '/') continue;
    if (controller.empty()) {
      if (id == "0" && controllers.empty()) return std::string(path);
      continue;
    }
    for (std::string_view c : split(controllers, ','))
      if (c == controller) return std::string(path);
  }
  return std::nullopt;
}

std::vector<RuntimeApply> runtime_applies_at_work(const std::string& proc_root, std::string_view controller,
                                                  const std::function<bool(const std::string&)>& in_a_container) {
  std::vector<RuntimeApply> applies;
  const std::unique_ptr<DIR, int (*)(DIR*)> dir(::opendir(proc_root.c_str()), ::closedir);
  if (!dir) return applies;
  while (const dirent* entry = ::readdir(dir.get())) {
    const auto pid = parse_pid_file(entry->d_name);  // a /proc directory: a pid alone
    if (!pid) continue;
    const std::string base = proc_root + "/" + entry->d_name;
    auto comm = read_proc_file(base + "/comm", 64);
    if (!comm) continue;
    if (!comm->empty() && comm->back() == '\n') comm->pop_back();
    if (!writer_waited_for(recognise_writer({*comm, "", "", *pid}))) continue;
    const auto cmdline = read_proc_file(base + "/cmdline", kCmdlineMax);
    if (!cmdline) continue;
    auto target = parse_apply_target(*cmdline);
    if (!target && cmdline->empty()) {
      const auto stat = read_proc_file(base + "/stat", 4096);
      if (stat && parse_stat_still_exiting(*stat)) target = ApplyTarget{"exit", ""};
    }
    if (!target) continue;
    const auto cgroup_text = read_proc_file(base + "/cgroup", kCgroupFileMax);
    if (!cgroup_text) continue;
    const auto cgroup = parse_proc_cgroup(*cgroup_text, controller);
    if (!cgroup || in_a_container(*cgroup)) continue;
    applies.push_back({*pid, std::move(*comm), std::move(*target)});
  }
  return applies;
}

}  // namespace gdw
