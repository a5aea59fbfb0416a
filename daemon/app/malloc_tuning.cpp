#include "app/malloc_tuning.h"

#include <malloc.h>

namespace gdw {

void tune_malloc_for_daemon() {
  // One arena. By default every thread that allocates gets its own arena (up to 8 per core),
  // and each keeps its high-water mark resident: the HTTP workers that built a /metrics
  // answer and gRPC's threads held ~0.6 MiB each after a few scrapes (~9 MiB in all). The
  // event loop does the daemon's work on one thread; the others allocate rarely, so the
  // shared arena's lock costs nothing measurable.
  ::mallopt(M_ARENA_MAX, 1);
  // A fixed threshold (the default's starting value): blocks this large always come from
  // mmap and go back to the kernel when freed. glibc otherwise raises the threshold to the
  // largest block freed so far, so a one-off large buffer (libbpf's copy of the kernel BTF,
  // 5.5 MiB, at probe load) moves every later large block onto the heap, where it stays.
  ::mallopt(M_MMAP_THRESHOLD, 128 * 1024);
}

}  // namespace gdw
