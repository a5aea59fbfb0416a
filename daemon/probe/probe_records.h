// Turns the raw ring-buffer records of bpf/devwatch.bpf.c into ProbeEvents. Pure: no
// syscalls, so the layout contract with the kernel side is testable in memory.
#pragma once

#include <string_view>

#include "core/result.h"
#include "probe/probe.h"

namespace gdw {

// `record` is one ring-buffer sample. Errors name the record type and the size mismatch
// (a kernel object built from a different devwatch_events.h).
Result<ProbeEvent> decode_probe_record(std::string_view record);

}  // namespace gdw
