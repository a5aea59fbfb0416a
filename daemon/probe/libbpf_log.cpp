#include "probe/libbpf_log.h"

#include <bpf/libbpf.h>

#include <cstdarg>
#include <cstdio>
#include <deque>
#include <mutex>
#include <string_view>
#include <vector>

namespace gdw {
namespace {

// A verifier log can be thousands of lines; only its end (where the rejection is) and
// libbpf's own summary lines are worth quoting.
constexpr std::size_t kMaxLines = 256;
constexpr std::size_t kMaxLineLength = 512;

struct CapturedLog {
  std::mutex mutex;
  std::deque<std::string> lines;
  std::string partial;  // libbpf sometimes prints one line in several calls
};

CapturedLog& captured() {
  static CapturedLog* log = new CapturedLog;  // outlives static destructors: libbpf may print late
  return *log;
}

void append_locked(CapturedLog& log, const char* text) {
  for (const char* p = text; *p; ++p) {
    if (*p == '\n') {
      log.lines.push_back(std::move(log.partial));
      log.partial.clear();
      if (log.lines.size() > kMaxLines) log.lines.pop_front();
    } else if (log.partial.size() < kMaxLineLength) {
      log.partial.push_back(*p);
    }
  }
}

int on_libbpf_print(enum libbpf_print_level level, const char* format, va_list args) {
  if (level == LIBBPF_DEBUG) return 0;
  // A verifier log arrives as one huge message and its reason is at the end: format it
  // whole, then keep the last lines.
  va_list measure;
  va_copy(measure, args);
  int length = std::vsnprintf(nullptr, 0, format, measure);
  va_end(measure);
  if (length < 0) return 0;
  std::vector<char> buffer(static_cast<std::size_t>(length) + 1);
  std::vsnprintf(buffer.data(), buffer.size(), format, args);
  CapturedLog& log = captured();
  std::lock_guard<std::mutex> lock(log.mutex);
  append_locked(log, buffer.data());
  return 0;
}

}  // namespace

void capture_libbpf_log() { libbpf_set_print(on_libbpf_print); }

void clear_libbpf_log() {
  CapturedLog& log = captured();
  std::lock_guard<std::mutex> lock(log.mutex);
  log.lines.clear();
  log.partial.clear();
}

std::vector<std::string> libbpf_log_tail(std::size_t max_lines) {
  CapturedLog& log = captured();
  std::lock_guard<std::mutex> lock(log.mutex);
  std::vector<std::string> out;
  std::size_t total = log.lines.size() + (log.partial.empty() ? 0 : 1);
  std::size_t skip = total > max_lines ? total - max_lines : 0;
  for (const auto& line : log.lines) {
    if (skip > 0) {
      --skip;
      continue;
    }
    out.push_back(line);
  }
  if (!log.partial.empty() && skip == 0) out.push_back(log.partial);
  return out;
}

namespace {

std::string join(const std::vector<std::string>& lines, const char* separator) {
  std::string out;
  for (const auto& line : lines) {
    if (!out.empty()) out += separator;
    out += line;
  }
  return out;
}

// The text between `open_quote` and the next single quote, e.g. a program name.
std::optional<std::string> quoted_after(const std::string& line, std::string_view open_quote) {
  auto at = line.find(open_quote);
  if (at == std::string::npos) return std::nullopt;
  auto start = at + open_quote.size();
  auto stop = line.find('\'', start);
  if (stop == std::string::npos) return std::nullopt;
  return line.substr(start, stop - start);
}

// libbpf prints "prog 'NAME': -- BEGIN PROG LOAD LOG --", the verifier log, then
// "-- END PROG LOAD LOG --".
std::optional<std::string> verifier_rejection(const std::vector<std::string>& lines) {
  constexpr std::string_view kBegin = "-- BEGIN PROG LOAD LOG --";
  constexpr std::string_view kEnd = "-- END PROG LOAD LOG --";
  constexpr std::size_t kReasonLines = 6;
  for (std::size_t end = lines.size(); end-- > 0;) {
    if (lines[end].find(kEnd) == std::string::npos) continue;
    std::size_t begin = end;
    while (begin > 0 && lines[begin].find(kBegin) == std::string::npos) --begin;
    std::string program = quoted_after(lines[begin], "prog '").value_or("?");
    std::vector<std::string> reason;
    for (std::size_t i = end - begin > kReasonLines ? end - kReasonLines : begin + 1; i < end; ++i) {
      if (!lines[i].empty()) reason.push_back(lines[i]);
    }
    return "the BPF verifier rejected program '" + program + "': " + join(reason, " | ");
  }
  return std::nullopt;
}

// tp_btf programs name their tracepoint through the BTF type btf_trace_<name>.
std::optional<std::string> missing_tracepoint(const std::vector<std::string>& lines) {
  for (const auto& line : lines) {
    if (auto tracepoint = quoted_after(line, "failed to find kernel BTF type ID of '")) {
      std::string program = quoted_after(line, "prog '").value_or("?");
      return "the kernel has no tracepoint '" + *tracepoint + "' (needed by program '" + program +
             "'; tracepoints are looked up in the kernel BTF)";
    }
  }
  return std::nullopt;
}

}  // namespace

std::optional<std::string> explain_libbpf_failure(const std::vector<std::string>& lines) {
  if (auto rejection = verifier_rejection(lines)) return rejection;
  return missing_tracepoint(lines);
}

}  // namespace gdw
