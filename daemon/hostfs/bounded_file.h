// Reading a small host file whole, bounded: the one reader behind the /proc, CDI, bundle-side
// and configuration parsers (parsers take strings; this is the reading half).
#pragma once

#include <cstddef>
#include <string>

#include "core/result.h"

namespace gdw {

struct FileLimits {
  std::size_t max_bytes = 1 << 20;  // larger is an error, not a truncation
  // O_NONBLOCK: a FIFO planted where a regular or procfs file is expected must not block
  // the daemon in open() or read(). (Off only where blocking is the intended behaviour.)
  bool nonblocking = true;
  bool regular_only = false;  // refuse anything but a regular file (fstat after open)
};

// The file's bytes. Errors say "<path>: <what>" and carry the errno (ENOENT: absent).
Result<std::string> read_bounded_file(const std::string& path, const FileLimits& limits);

}  // namespace gdw
