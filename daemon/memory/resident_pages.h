// Giving back what only startup needed.
//
// VmRSS counts every file page this process has mapped, and starting up maps a lot that
// the daemon never uses again: the dynamic linker reads the symbol and relocation tables of
// ~100 shared libraries (gRPC, protobuf, OpenSSL, libcurl and theirs), their initialisers
// run once, and each fault maps its neighbours too (fault-around). At 500 containers that was
// ~13 MiB of a ~22 MiB file-backed RSS. Those pages are clean copies of the files, so this
// process can drop its mappings of them: a page used again is mapped again from the page
// cache (a minor fault), and one page at a time (MADV_RANDOM, no fault-around).
//
// Only read-only private file mappings without a single copied-on-write page qualify: their
// contents are exactly the file's, so dropping them loses nothing. Writable mappings, the
// relocated (RELRO) parts of libraries, the heap, stacks and shared mappings (the probe's
// ring buffers) are never touched.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string_view>
#include <vector>

#include "core/result.h"

namespace gdw {

struct CleanFileMapping {
  std::uintptr_t start = 0, end = 0;
  std::size_t resident_kib = 0;  // its Rss: what dropping it gives back now
};

// Parser (smaps text of one process, /proc/<pid>/smaps format): the mappings that qualify.
std::vector<CleanFileMapping> clean_file_mappings(std::string_view smaps);

struct ReleasedMemory {
  std::size_t file_kib = 0;  // Rss of the clean file mappings dropped
  bool heap_trimmed = false;  // malloc_trim gave pages back
};

// Drops this process's clean file mappings (/proc/self/smaps: this process's own view, not a
// host path) and returns the heap's free pages (malloc_trim). For once startup is done.
Result<ReleasedMemory> release_startup_memory();

}  // namespace gdw
