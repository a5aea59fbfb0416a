#include "runtime/create_runtime.h"

#include <charconv>

#include "core/apply_wait.h"
#include "core/writer_name.h"
#include "hostfs/bounded_file.h"

namespace gdw {
namespace {

std::optional<pid_t> parse_positive(std::string_view text) {
  pid_t pid = 0;
  const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), pid);
  if (ec != std::errc() || end != text.data() + text.size() || pid <= 0) return std::nullopt;
  return pid;
}

}  // namespace

std::optional<pid_t> parse_pid_file(std::string_view text) {
  if (!text.empty() && text.back() == '\n') text.remove_suffix(1);
  return parse_positive(text);
}

std::vector<std::string_view> stat_fields_after_comm(std::string_view stat) {
  std::vector<std::string_view> fields;
  const auto close = stat.rfind(')');
  if (close == std::string_view::npos) return fields;
  std::string_view rest = stat.substr(close + 1);
  while (!rest.empty()) {
    const auto end = rest.find(' ');
    if (const std::string_view field = rest.substr(0, end); !field.empty()) fields.push_back(field);
    if (end == std::string_view::npos) break;
    rest.remove_prefix(end + 1);
  }
  return fields;
}

std::optional<pid_t> parse_stat_parent(std::string_view stat) {
  const auto fields = stat_fields_after_comm(stat);
  if (fields.size() < 2) return std::nullopt;
  return parse_positive(fields[1]);  // field 4 (ppid)
}

std::optional<CreateRuntime> read_create_runtime(const std::string& pid_file, const std::string& proc_root) {
  const FileLimits small{.max_bytes = 4096, .nonblocking = true, .regular_only = true};
  const auto pid_text = read_bounded_file(pid_file, small);
  if (!pid_text) return std::nullopt;
  const auto child = parse_pid_file(*pid_text);
  if (!child) return std::nullopt;
  const FileLimits proc{.max_bytes = 4096, .nonblocking = true, .regular_only = false};
  const auto stat = read_bounded_file(proc_root + "/" + std::to_string(*child) + "/stat", proc);
  if (!stat) return std::nullopt;
  const auto parent = parse_stat_parent(*stat);
  if (!parent) return std::nullopt;
  auto comm = read_bounded_file(proc_root + "/" + std::to_string(*parent) + "/comm", proc);
  if (!comm) return std::nullopt;
  if (!comm->empty() && comm->back() == '\n') comm->pop_back();
  return CreateRuntime{*parent, std::move(*comm)};
}

std::optional<CreateRuntime> create_runtime_at_work(const std::string& pid_file, const std::string& proc_root) {
  auto runtime = read_create_runtime(pid_file, proc_root);
  if (!runtime || !writer_waited_for(recognise_writer({runtime->comm, "", "", runtime->pid}))) return std::nullopt;
  return runtime;
}

}  // namespace gdw
