// glibc malloc settings for the long-running daemon (`run`), applied before any thread
// starts. See malloc_tuning.cpp for why each one.
#pragma once

namespace gdw {

void tune_malloc_for_daemon();

}  // namespace gdw
