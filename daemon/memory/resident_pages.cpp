#include "memory/resident_pages.h"

#include <malloc.h>
#include <sys/mman.h>

#include <cerrno>
#include <charconv>
#include <cstring>
#include <optional>
#include <string>

#include "hostfs/bounded_file.h"

namespace gdw {
namespace {

std::string_view next_line(std::string_view& text) {
  const auto nl = text.find('\n');
  std::string_view line = text.substr(0, nl);
  text.remove_prefix(nl == std::string_view::npos ? text.size() : nl + 1);
  return line;
}

std::string_view next_field(std::string_view& line) {
  while (!line.empty() && line.front() == ' ') line.remove_prefix(1);
  const auto sp = line.find(' ');
  std::string_view field = line.substr(0, sp);
  line.remove_prefix(sp == std::string_view::npos ? line.size() : sp);
  return field;
}

bool parse_hex(std::string_view s, std::uintptr_t& out) {
  auto [p, ec] = std::from_chars(s.data(), s.data() + s.size(), out, 16);
  return ec == std::errc() && p == s.data() + s.size();
}

// One mapping's header: "start-end perms offset dev inode [path]". Attribute lines
// ("Rss:       12 kB") have no '-' in their first field.
struct Header {
  std::uintptr_t start = 0, end = 0;
  bool qualifies = false;  // read-only, private, backed by a named file
};

bool parse_header(std::string_view line, Header& h) {
  std::string_view range = next_field(line);
  const auto dash = range.find('-');
  if (dash == std::string_view::npos || !parse_hex(range.substr(0, dash), h.start) ||
      !parse_hex(range.substr(dash + 1), h.end) || h.end <= h.start)
    return false;
  const std::string_view perms = next_field(line);
  next_field(line);                                  // offset
  next_field(line);                                  // device
  const std::string_view inode = next_field(line);
  while (!line.empty() && line.front() == ' ') line.remove_prefix(1);
  h.qualifies = perms.size() == 4 && perms[0] == 'r' && perms[1] == '-' && perms[3] == 'p' && inode != "0" &&
                !line.empty() && line.front() == '/';
  return true;
}

// "Anonymous:     4 kB" -> 4; nullopt for another attribute.
std::optional<std::size_t> attribute_kib(std::string_view line, std::string_view name) {
  if (line.substr(0, name.size()) != name || line.size() <= name.size() || line[name.size()] != ':') return {};
  line.remove_prefix(name.size() + 1);
  const std::string_view value = next_field(line);
  std::size_t kib = 0;
  auto [p, ec] = std::from_chars(value.data(), value.data() + value.size(), kib);
  if (ec != std::errc() || p != value.data() + value.size()) return {};
  return kib;
}

}  // namespace

std::vector<CleanFileMapping> clean_file_mappings(std::string_view smaps) {
  std::vector<CleanFileMapping> out;
  Header h;
  bool open = false, anonymous_seen = false, anonymous_zero = false;
  std::size_t rss = 0;
  auto close = [&] {
    // Without an "Anonymous: 0 kB" line we cannot know it is clean: leave it.
    if (open && h.qualifies && anonymous_seen && anonymous_zero) out.push_back({h.start, h.end, rss});
    open = false;
  };
  while (!smaps.empty()) {
    const std::string_view line = next_line(smaps);
    Header next;
    if (parse_header(line, next)) {
      close();
      h = next;
      open = true;
      anonymous_seen = anonymous_zero = false;
      rss = 0;
    } else if (auto kib = attribute_kib(line, "Rss")) {
      rss = *kib;
    } else if (auto anon = attribute_kib(line, "Anonymous")) {
      anonymous_seen = true;
      anonymous_zero = *anon == 0;
    }
  }
  close();
  return out;
}

Result<ReleasedMemory> release_startup_memory() {
  ReleasedMemory released;
  // ~100 libraries x a few mappings x ~25 lines: a few hundred KiB.
  auto smaps = read_bounded_file("/proc/self/smaps", FileLimits{.max_bytes = 8u << 20});
  if (!smaps) return smaps.error();
  for (const auto& m : clean_file_mappings(*smaps)) {
    void* at = reinterpret_cast<void*>(m.start);
    const std::size_t length = m.end - m.start;
    // Random first: refaults then map only the page touched, not its neighbours.
    if (::madvise(at, length, MADV_RANDOM) != 0 || ::madvise(at, length, MADV_DONTNEED) != 0)
      return errno_error(errno, std::string("madvise of a clean file mapping: ") + std::strerror(errno));
    released.file_kib += m.resident_kib;
  }
  released.heap_trimmed = ::malloc_trim(0) != 0;
  return released;
}

}  // namespace gdw
