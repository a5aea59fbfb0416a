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

// The device numbers of a denied open were not known to the kernel side (0:0): the path
// was not registered with watch_device_node.
bool needs_device_lookup(const DeniedOpenEvent& event);

// Where the opener's view of `event.path` can be reached from this process while the
// opener lives: /proc/<pid>/root<path> for absolute paths, /proc/<pid>/cwd/<path> for
// paths relative to AT_FDCWD, /proc/<pid>/fd/<dfd>/<path> otherwise. An absolute symlink
// inside the opener's tree resolves against our root, not the opener's.
std::string opener_view_path(const DeniedOpenEvent& event);

}  // namespace gdw
