#include "node/self_exe.h"

#include <unistd.h>

#include <climits>

namespace gdw {

std::string self_exe() {
  char buf[PATH_MAX];
  ssize_t n = ::readlink("/proc/self/exe", buf, sizeof buf - 1);
  if (n <= 0) return "gpu-devwatch";
  return std::string(buf, static_cast<std::size_t>(n));
}

}  // namespace gdw
