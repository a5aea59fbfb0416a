#include "log/log.h"

#include <sys/stat.h>
#include <unistd.h>
#include <syslog.h>
#define SD_JOURNAL_SUPPRESS_LOCATION
#include <spdlog/spdlog.h>
#include <systemd/sd-journal.h>

#include <cstdio>
#include <cstdlib>
#include <memory>
#include <vector>

#include "log/escape.h"
#include "log/held_lines_sink.h"

namespace gdw::log {
namespace {

bool g_journal = false;
Level g_level = Level::kInfo;
std::shared_ptr<spdlog::logger> g_logger;
std::shared_ptr<HeldLinesSink> g_sink;

Level parse_level(const std::string& s) {
  if (s == "trace") return Level::kTrace;
  if (s == "debug") return Level::kDebug;
  if (s == "warn") return Level::kWarn;
  if (s == "error") return Level::kError;
  return Level::kInfo;
}

spdlog::level::level_enum to_spdlog(Level l) {
  switch (l) {
    case Level::kTrace: return spdlog::level::trace;
    case Level::kDebug: return spdlog::level::debug;
    case Level::kInfo: return spdlog::level::info;
    case Level::kWarn: return spdlog::level::warn;
    case Level::kError: return spdlog::level::err;
  }
  return spdlog::level::info;
}

int to_syslog(Level l) {
  switch (l) {
    case Level::kTrace:
    case Level::kDebug: return LOG_DEBUG;
    case Level::kInfo: return LOG_INFO;
    case Level::kWarn: return LOG_WARNING;
    case Level::kError: return LOG_ERR;
  }
  return LOG_INFO;
}

// systemd documents JOURNAL_STREAM=<dev>:<inode> of the stream it connected to stderr.
bool stderr_is_journal() {
  const char* env = std::getenv("JOURNAL_STREAM");
  if (!env) return false;
  unsigned long long dev = 0, ino = 0;
  if (std::sscanf(env, "%llu:%llu", &dev, &ino) != 2) return false;
  struct stat st{};
  if (::fstat(2, &st) != 0) return false;
  return st.st_dev == dev && st.st_ino == ino;
}

spdlog::logger& logger() {  // a reference: no shared_ptr count changes per line
  if (!g_logger) {
    g_sink = std::make_shared<HeldLinesSink>(STDERR_FILENO);
    g_logger = std::make_shared<spdlog::logger>("gpu-devwatch", g_sink);
    g_logger->set_pattern("%Y-%m-%dT%H:%M:%S.%fZ %l %v", spdlog::pattern_time_type::utc);
    g_logger->set_level(to_spdlog(g_level));
    // No flush_on: the sink writes each line itself, or its writer thread does.
  }
  return *g_logger;
}

void append_field(std::string& line, const char* key, std::string_view value) {
  if (value.empty()) return;
  line += ' ';
  line += key;
  line += '=';
  append_logfmt_value(line, value);
}

}  // namespace

void init(const std::string& level) {
  g_journal = stderr_is_journal();
  set_level(level);
}

void set_level(const std::string& level) {
  g_level = parse_level(level);
  logger().set_level(to_spdlog(g_level));
}

bool to_journal() { return g_journal; }

bool write_in_batches(std::chrono::microseconds hold) {
  logger();
  return g_journal || g_sink->start_writer(hold);
}

void write_directly() {
  logger();
  g_sink->stop_writer();
}

void write(Level level, std::string_view message, const Fields& f) {
  if (level < g_level) return;
  if (g_journal) {
    std::vector<std::string> entries;
    entries.push_back("MESSAGE=" + std::string(message));
    entries.push_back("PRIORITY=" + std::to_string(to_syslog(level)));
    entries.push_back("SYSLOG_IDENTIFIER=gpu-devwatch");
    auto field = [&](const char* key, std::string_view v) {
      if (!v.empty()) entries.push_back(std::string(key) + "=" + std::string(v));
    };
    field("NAMESPACE", f.pod_namespace);
    field("POD", f.pod);
    field("CONTAINER", f.container);
    field("DEVICE", f.device);
    field("RULE", f.rule);
    field("CGROUP", f.cgroup);
    field("WRITER", f.writer);
    std::vector<struct iovec> iov;
    for (auto& e : entries) iov.push_back({e.data(), e.size()});
    if (sd_journal_sendv(iov.data(), static_cast<int>(iov.size())) >= 0) return;
  }
  // Whatever a caller put in the message (tenant strings included) stays on this line.
  // One buffer for the whole line: a storm's repairs log one each.
  std::string line;
  line.reserve(message.size() + f.pod_namespace.size() + f.pod.size() + f.container.size() + f.device.size() +
               f.rule.size() + f.cgroup.size() + f.writer.size() + 96);
  append_escaped_text(line, message);
  append_field(line, "namespace", f.pod_namespace);
  append_field(line, "pod", f.pod);
  append_field(line, "container", f.container);
  append_field(line, "device", f.device);
  append_field(line, "rule", f.rule);
  append_field(line, "cgroup", f.cgroup);
  append_field(line, "writer", f.writer);
  logger().log(to_spdlog(level), line);
}

}  // namespace gdw::log
