#pragma once

#include <string>

namespace gdw {

struct CheckOptions {
  std::string config_path;
  bool json = false;
  bool repair = false;
};

// Exit codes: 0 nothing missing, 1 something missing or not checkable, 2 error.
int run_check(const CheckOptions& options);

}  // namespace gdw
