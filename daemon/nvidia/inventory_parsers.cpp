// Parsers for the driver's procfs text: /proc/devices, gpus/<bus>/information and
// nvidia-caps/mig-minors. Each rejects a malformed line with its number rather than
// guessing, because a wrong major or minor would grant the wrong device.
#include "nvidia/inventory.h"

#include <charconv>
#include <optional>
#include <utility>

namespace gdw {
namespace {

bool is_blank(char c) { return c == ' ' || c == '\t' || c == '\r'; }

std::string_view trim(std::string_view s) {
  while (!s.empty() && is_blank(s.front())) s.remove_prefix(1);
  while (!s.empty() && is_blank(s.back())) s.remove_suffix(1);
  return s;
}

// Splits text into lines, numbering them from 1, with or without a final newline.
class Lines {
 public:
  explicit Lines(std::string_view text) : rest_(text) {}
  bool next(std::string_view& line) {
    if (done_) return false;
    ++number_;
    std::size_t nl = rest_.find('\n');
    line = rest_.substr(0, nl);
    if (nl == std::string_view::npos) {
      done_ = true;
      // A final newline leaves nothing behind: that is not a line of its own.
      if (line.empty()) return false;
    } else {
      rest_.remove_prefix(nl + 1);
    }
    return true;
  }
  std::size_t number() const { return number_; }

 private:
  std::string_view rest_;
  std::size_t number_ = 0;
  bool done_ = false;
};

// Quotes a line for an error message: bounded, control bytes escaped, so a corrupt file
// cannot flood or garble the log.
std::string quoted(std::string_view s) {
  constexpr std::size_t kMax = 60;
  std::string out = "'";
  for (std::size_t i = 0; i < s.size() && i < kMax; ++i) {
    auto c = static_cast<unsigned char>(s[i]);
    if (c < 0x20 || c == 0x7f) {
      static constexpr char kHex[] = "0123456789abcdef";
      out += "\\x";
      out += kHex[c >> 4];
      out += kHex[c & 0xf];
    } else {
      out += static_cast<char>(c);
    }
  }
  if (s.size() > kMax) out += "...";
  out += "'";
  return out;
}

Error line_error(std::size_t line_no, const std::string& why) {
  return Error{"line " + std::to_string(line_no) + ": " + why};
}

// A plain decimal number: digits only, no sign, fits in 32 bits.
std::optional<std::uint32_t> parse_u32(std::string_view s) {
  if (s.empty() || s.size() > 10) return std::nullopt;
  for (char c : s)
    if (c < '0' || c > '9') return std::nullopt;
  std::uint32_t value = 0;
  auto [ptr, ec] = std::from_chars(s.data(), s.data() + s.size(), value);
  if (ec != std::errc() || ptr != s.data() + s.size()) return std::nullopt;
  return value;
}

// Splits "<first> <rest>" at the first run of blanks; rest is empty when there is none.
std::pair<std::string_view, std::string_view> split_first_word(std::string_view s) {
  std::size_t end = 0;
  while (end < s.size() && !is_blank(s[end])) ++end;
  return {s.substr(0, end), trim(s.substr(end))};
}

bool is_section_header(std::string_view line) {
  constexpr std::string_view kSuffix = "devices:";
  return line.size() >= kSuffix.size() && line.substr(line.size() - kSuffix.size()) == kSuffix;
}

}  // namespace

Result<std::map<std::string, std::uint32_t>> parse_proc_devices(std::string_view text) {
  std::map<std::string, std::uint32_t> majors;
  Lines lines(text);
  std::string_view raw;
  bool in_char_section = false;
  bool seen_char_section = false;
  while (lines.next(raw)) {
    std::string_view line = trim(raw);
    if (!in_char_section) {
      if (line == "Character devices:" && !seen_char_section) in_char_section = seen_char_section = true;
      continue;
    }
    // The section ends at the blank line before "Block devices:".
    if (line.empty() || is_section_header(line)) {
      in_char_section = false;
      continue;
    }
    auto [number, name] = split_first_word(line);
    auto major = parse_u32(number);
    if (!major) return line_error(lines.number(), "expected '<major> <name>', got " + quoted(raw));
    if (name.empty()) return line_error(lines.number(), "no driver name after the major in " + quoted(raw));
    // The kernel lists majors in ascending order; should a name ever appear twice, the
    // first (lowest) major is kept, which is the one registered first.
    majors.emplace(std::string(name), *major);
  }
  if (!seen_char_section) return Error{"no 'Character devices:' section"};
  return majors;
}

Result<GpuDevice> parse_gpu_information(std::string_view text) {
  GpuDevice gpu;
  bool have_uuid = false;
  bool have_minor = false;
  Lines lines(text);
  std::string_view raw;
  while (lines.next(raw)) {
    std::string_view line = trim(raw);
    if (line.empty()) continue;
    std::size_t colon = line.find(':');
    if (colon == std::string_view::npos) return line_error(lines.number(), "expected 'Key: value', got " + quoted(raw));
    std::string_view key = trim(line.substr(0, colon));
    std::string_view value = trim(line.substr(colon + 1));
    if (key == "GPU UUID") {
      if (have_uuid) return line_error(lines.number(), "GPU UUID given twice");
      if (value.rfind("GPU-", 0) != 0 || value.size() == 4)
        return line_error(lines.number(), "GPU UUID " + quoted(value) + " does not look like GPU-<uuid>");
      gpu.uuid = std::string(value);
      have_uuid = true;
    } else if (key == "Device Minor") {
      if (have_minor) return line_error(lines.number(), "Device Minor given twice");
      auto minor = parse_u32(value);
      if (!minor) return line_error(lines.number(), "Device Minor " + quoted(value) + " is not a number");
      gpu.minor = *minor;
      have_minor = true;
    } else if (key == "Model") {
      gpu.model = std::string(value);
    } else if (key == "Bus Location") {
      gpu.bus_location = std::string(value);
    } else if (key == "GPU Excluded") {
      if (value == "Yes") {
        gpu.excluded = true;
      } else if (value == "No") {
        gpu.excluded = false;
      } else {
        return line_error(lines.number(), "GPU Excluded must be Yes or No, got " + quoted(value));
      }
    }
  }
  if (!have_uuid) return Error{"no 'GPU UUID' line"};
  if (!have_minor) return Error{"no 'Device Minor' line"};
  return gpu;
}

Result<std::map<std::string, std::uint32_t>> parse_mig_minors(std::string_view text) {
  std::map<std::string, std::uint32_t> minors;
  Lines lines(text);
  std::string_view raw;
  while (lines.next(raw)) {
    std::string_view line = trim(raw);
    if (line.empty()) continue;
    auto [path, rest] = split_first_word(line);
    auto minor = parse_u32(rest);
    if (!minor) return line_error(lines.number(), "expected '<path> <minor>', got " + quoted(raw));
    auto [it, inserted] = minors.emplace(std::string(path), *minor);
    if (!inserted && it->second != *minor)
      return line_error(lines.number(), quoted(path) + " listed twice with different minors");
  }
  return minors;
}

}  // namespace gdw
