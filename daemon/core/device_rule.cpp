#include "core/device_rule.h"

#include <charconv>

namespace gdw {
namespace {

bool is_space(char c) { return c == ' ' || c == '\t'; }

// Parses `*` or a decimal u32 at text[pos], advancing pos. Mirrors the kernel, which
// takes at most 12 digits and rejects values that overflow u32.
Result<std::uint32_t> parse_number(std::string_view text, std::size_t& pos, const char* what) {
  if (pos < text.size() && text[pos] == '*') {
    ++pos;
    return kAnyNumber;
  }
  std::size_t start = pos;
  while (pos < text.size() && text[pos] >= '0' && text[pos] <= '9') ++pos;
  if (pos == start) return Error{std::string("expected a number or * for the ") + what};
  if (pos - start > 12) return Error{std::string(what) + " number too long"};
  std::uint64_t value = 0;
  auto [ptr, ec] = std::from_chars(text.data() + start, text.data() + pos, value);
  if (ec != std::errc() || value >= kAnyNumber) return Error{std::string(what) + " number out of range"};
  return static_cast<std::uint32_t>(value);
}

}  // namespace

Result<std::uint8_t> parse_access(std::string_view text) {
  if (text.empty() || text.size() > 3) return Error{"access must be 1 to 3 of r, w, m"};
  std::uint8_t access = 0;
  for (char c : text) {
    switch (c) {
      case 'r': access |= kAccessRead; break;
      case 'w': access |= kAccessWrite; break;
      case 'm': access |= kAccessMknod; break;
      default: return Error{std::string("invalid access character '") + c + "'"};
    }
  }
  return access;
}

std::string format_access(std::uint8_t access) {
  std::string s;
  if (access & kAccessRead) s += 'r';
  if (access & kAccessWrite) s += 'w';
  if (access & kAccessMknod) s += 'm';
  return s;
}

Result<DeviceRule> parse_device_rule(std::string_view text) {
  while (!text.empty() && (is_space(text.back()) || text.back() == '\n')) text.remove_suffix(1);
  if (text.empty()) return Error{"empty device rule"};
  DeviceRule rule;
  switch (text[0]) {
    case 'a': return DeviceRule{};  // the kernel ignores everything after `a`
    case 'c': rule.type = DeviceType::kChar; break;
    case 'b': rule.type = DeviceType::kBlock; break;
    default: return Error{"device rule '" + std::string(text) + "': type must be a, b or c"};
  }
  auto fail = [&](const std::string& why) {
    return Error{"device rule '" + std::string(text) + "': " + why};
  };
  std::size_t pos = 1;
  if (pos >= text.size() || !is_space(text[pos])) return fail("expected a space after the type");
  ++pos;
  auto major = parse_number(text, pos, "major");
  if (!major) return fail(major.error().message);
  if (pos >= text.size() || text[pos] != ':') return fail("expected ':' after the major");
  ++pos;
  auto minor = parse_number(text, pos, "minor");
  if (!minor) return fail(minor.error().message);
  if (pos >= text.size() || !is_space(text[pos])) return fail("expected a space before the access");
  ++pos;
  auto access = parse_access(text.substr(pos));
  if (!access) return fail(access.error().message);
  rule.major = *major;
  rule.minor = *minor;
  rule.access = *access;
  return rule;
}

std::string format_device_rule(const DeviceRule& rule) {
  // In one buffer: a repair formats one rule per granted device, on the storm's path.
  char buf[32];  // "c 4294967295:4294967295 rwm"
  char* p = buf;
  auto number = [&](std::uint32_t n) {
    if (n == kAnyNumber) {
      *p++ = '*';
      return;
    }
    p = std::to_chars(p, buf + sizeof buf, n).ptr;
  };
  *p++ = static_cast<char>(rule.type);
  *p++ = ' ';
  number(rule.major);
  *p++ = ':';
  number(rule.minor);
  *p++ = ' ';
  if (rule.access & kAccessRead) *p++ = 'r';
  if (rule.access & kAccessWrite) *p++ = 'w';
  if (rule.access & kAccessMknod) *p++ = 'm';
  return std::string(buf, p);
}

std::string format_device_number(const DeviceNumber& dev) {
  return std::to_string(dev.major) + ":" + std::to_string(dev.minor);
}

Result<DeviceList> parse_devices_list(std::string_view text) {
  DeviceList list;
  std::size_t line_no = 0;
  while (!text.empty()) {
    ++line_no;
    std::size_t nl = text.find('\n');
    std::string_view line = text.substr(0, nl);
    text = nl == std::string_view::npos ? std::string_view{} : text.substr(nl + 1);
    if (line.find_first_not_of(" \t") == std::string_view::npos) continue;
    auto rule = parse_device_rule(line);
    if (!rule) return Error{"devices.list line " + std::to_string(line_no) + ": " + rule.error().message};
    if (rule->type == DeviceType::kAll) {
      list.allow_all = true;
    } else {
      list.exceptions.push_back(*rule);
    }
  }
  // The kernel shows only `a *:* rwm` for a default-allow cgroup; if anything else appears
  // beside it the text did not come from the kernel, but `a` still means allow-all.
  if (list.allow_all) list.exceptions.clear();
  return list;
}

bool rule_covers(const DeviceRule& rule, const DeviceNumber& dev, std::uint8_t access) {
  if (rule.type == DeviceType::kAll) return (access & ~rule.access) == 0;
  if (rule.type != dev.type) return false;
  if (rule.major != kAnyNumber && rule.major != dev.major) return false;
  if (rule.minor != kAnyNumber && rule.minor != dev.minor) return false;
  return (access & ~rule.access) == 0;
}

bool device_list_allows(const DeviceList& list, const DeviceNumber& dev, std::uint8_t access) {
  if (list.allow_all) return true;
  for (const auto& ex : list.exceptions) {
    if (rule_covers(ex, dev, access)) return true;
  }
  return false;
}

}  // namespace gdw
