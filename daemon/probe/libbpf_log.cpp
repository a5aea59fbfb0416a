#include "probe/libbpf_log.h"

#include <bpf/libbpf.h>

#include <cstdarg>
#include <cstdio>
#include <deque>
#include <mutex>
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

}  // namespace gdw
