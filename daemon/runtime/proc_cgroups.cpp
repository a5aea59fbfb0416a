#include "runtime/proc_cgroups.h"

#include "hostfs/bounded_file.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <charconv>
#include <cstring>

namespace gdw {
namespace {

// The real file is well under 1 KiB (one line per controller the kernel has).
constexpr std::size_t kMaxProcCgroups = 64 * 1024;

std::vector<std::string_view> fields_of(std::string_view line) {
  std::vector<std::string_view> fields;
  std::size_t i = 0;
  while (i < line.size()) {
    while (i < line.size() && (line[i] == ' ' || line[i] == '\t')) ++i;
    std::size_t start = i;
    while (i < line.size() && line[i] != ' ' && line[i] != '\t') ++i;
    if (i > start) fields.push_back(line.substr(start, i - start));
  }
  return fields;
}

template <class T>
bool parse_number(std::string_view s, T& out) {
  const char* end = s.data() + s.size();
  auto [ptr, ec] = std::from_chars(s.data(), end, out);
  return ec == std::errc() && ptr == end;
}

Result<ProcCgroupsEntry> parse_line(std::string_view line) {
  const auto f = fields_of(line);
  ProcCgroupsEntry e;
  unsigned enabled = 0;
  if (f.size() != 4 || !parse_number(f[1], e.hierarchy) || !parse_number(f[2], e.cgroups) ||
      !parse_number(f[3], enabled) || enabled > 1) {
    return Error{"malformed line '" + std::string(line) + "'"};
  }
  e.controller = std::string(f[0]);
  e.enabled = enabled == 1;
  return e;
}


}  // namespace

Result<std::vector<ProcCgroupsEntry>> parse_proc_cgroups(std::string_view text) {
  std::vector<ProcCgroupsEntry> entries;
  while (!text.empty()) {
    const auto nl = text.find('\n');
    const std::string_view line = text.substr(0, nl);
    text.remove_prefix(nl == std::string_view::npos ? text.size() : nl + 1);
    if (line.empty() || line.front() == '#') continue;
    auto entry = parse_line(line);
    if (!entry) return entry.error();
    entries.push_back(std::move(*entry));
  }
  return entries;
}

Result<std::uint32_t> v1_hierarchy_id(const std::vector<ProcCgroupsEntry>& entries, std::string_view controller) {
  const std::string name(controller);
  for (const auto& e : entries) {
    if (e.controller != controller) continue;
    if (!e.enabled) return Error{"the " + name + " controller is disabled"};
    if (e.hierarchy == 0) return Error{"the " + name + " controller is on no cgroup v1 hierarchy"};
    return e.hierarchy;
  }
  return Error{"no " + name + " controller listed"};
}

Result<std::uint32_t> read_v1_hierarchy_id(const std::string& proc_root, std::string_view controller) {
  const std::string path = proc_root + "/cgroups";
  auto text = read_bounded_file(path, {.max_bytes = kMaxProcCgroups});
  if (!text) return text.error();
  auto entries = parse_proc_cgroups(*text);
  if (!entries) return with_context(path, entries.error());
  auto id = v1_hierarchy_id(*entries, controller);
  if (!id) return with_context(path, id.error());
  return id;
}

}  // namespace gdw
