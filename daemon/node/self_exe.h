#pragma once

#include <string>

namespace gdw {
// This program's own executable (for re-executing helper subcommands such as nvml-query).
std::string self_exe();
}  // namespace gdw
