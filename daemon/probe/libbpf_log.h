// libbpf prints through one process-wide callback. The probe routes it into a bounded
// buffer instead of stderr, so that a failed load can quote what libbpf and the verifier
// said inside its error message.
#pragma once

#include <optional>
#include <string>
#include <vector>

namespace gdw {

// Installs the capturing callback (idempotent). Debug-level messages are not kept.
void capture_libbpf_log();
// Forgets what was captured so far (before an operation whose messages matter).
void clear_libbpf_log();
// The last `max_lines` captured lines, oldest first, without trailing newlines.
std::vector<std::string> libbpf_log_tail(std::size_t max_lines);

// Pure: reads libbpf's log lines of a failed load/attach and says what an operator can act
// on: a verifier rejection (the program's name and the last lines of the verifier log,
// where the reason is) or a tp_btf tracepoint the kernel does not have. nullopt when the
// log shows neither.
std::optional<std::string> explain_libbpf_failure(const std::vector<std::string>& lines);

}  // namespace gdw
