// Text-log escaping. Tenant-controlled strings (a writer's comm, an executable's path, pod
// names, open() paths) end up in log lines; in the text (stderr) sink one raw newline would
// let them forge a whole line. Journald is not affected: its fields are length-delimited.
#pragma once

#include <string>
#include <string_view>

namespace gdw::log {

// Free text: every control byte (< 0x20, 0x7f) and the backslash escaped (\n \r \t \\,
// \u00NN for the rest), so the result is one line and reads back unambiguously.
std::string escape_text(std::string_view text);
void append_escaped_text(std::string& out, std::string_view text);  // the same, onto `out`

// A logfmt value: bare when it has no space, '=', '"', backslash or control byte; else
// quoted, with \" \\ \n \r \t \u00NN inside.
std::string logfmt_value(std::string_view value);
void append_logfmt_value(std::string& out, std::string_view value);  // the same, onto `out`

}  // namespace gdw::log
