// Logging: spdlog text on stderr, or journald entries with structured fields (POD,
// NAMESPACE, CONTAINER, DEVICE, RULE, CGROUP, WRITER) when stderr is connected to the
// journal (systemd sets JOURNAL_STREAM). Callers log once, where they have the context.
// Text lines are logfmt-escaped (log/escape.h): no message or field can start a new line.
#pragma once

#include <chrono>
#include <string>
#include <string_view>

namespace gdw::log {

enum class Level { kTrace, kDebug, kInfo, kWarn, kError };

struct Fields {
  std::string_view pod_namespace;
  std::string_view pod;
  std::string_view container;
  std::string_view device;
  std::string_view rule;
  std::string_view cgroup;
  std::string_view writer;
};

// level: trace | debug | info | warn | error. Detects journald from JOURNAL_STREAM.
void init(const std::string& level);
void set_level(const std::string& level);
bool to_journal();

// Text lines (not journal entries) from now on go to a writer thread, which writes them in
// batches at most `hold` after a batch's first line; warnings and errors at once
// (log/held_lines_sink.h says why). Order is kept; nothing is dropped. false: the thread
// could not be started, and each line is written as it is logged.
bool write_in_batches(std::chrono::microseconds hold);
// Writes what is pending and stops the thread: each line is written as it is logged again.
void write_directly();

void write(Level level, std::string_view message, const Fields& fields = {});
inline void debug(std::string_view m, const Fields& f = {}) { write(Level::kDebug, m, f); }
inline void info(std::string_view m, const Fields& f = {}) { write(Level::kInfo, m, f); }
inline void warn(std::string_view m, const Fields& f = {}) { write(Level::kWarn, m, f); }
inline void error(std::string_view m, const Fields& f = {}) { write(Level::kError, m, f); }

}  // namespace gdw::log
