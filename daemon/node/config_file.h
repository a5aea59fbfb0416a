#pragma once

#include <string>

#include "core/config.h"

namespace gdw {

// The file read when --config is not given; absent means all defaults.
inline constexpr const char* kDefaultConfigPath = "/etc/gpu-devwatch/gpu-devwatch.yaml";

// path empty: kDefaultConfigPath if it exists, else defaults. An explicit path must exist.
Result<Config> load_config_file(const std::string& path);

}  // namespace gdw
