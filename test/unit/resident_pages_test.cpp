// Which of a process's mappings the daemon drops once startup is done: only read-only private
// file mappings whose every page is still the file's own (memory/resident_pages.h).
#include "memory/resident_pages.h"

#include <gtest/gtest.h>

namespace gdw {
namespace {

// The shape of /proc/<pid>/smaps (kernel 6.x), trimmed to the lines that matter plus a few
// that do not.
std::string mapping(const std::string& header, int rss_kib, int anonymous_kib) {
  return header + "\nSize:                128 kB\nRss:                 " + std::to_string(rss_kib) +
         " kB\nPss:                  12 kB\nAnonymous:           " + std::to_string(anonymous_kib) +
         " kB\nTHPeligible:    0\nVmFlags: rd ex mr mw me sd \n";
}

TEST(CleanFileMappings, TakesReadOnlyPrivateFileMappingsWithoutCopiedPages) {
  const std::string smaps =
      mapping("7f0000000000-7f0000010000 r-xp 00000000 08:01 1234                       /usr/lib/libx.so.1", 40, 0) +
      mapping("7f0000010000-7f0000012000 r--p 00010000 08:01 1234                       /usr/lib/libx.so.1", 8, 0) +
      mapping("555500000000-555500001000 r--p 00000000 08:01 99   /opt/gpu devwatch/bin/gpu-devwatch", 4, 0);
  const auto m = clean_file_mappings(smaps);
  ASSERT_EQ(m.size(), 3u);
  EXPECT_EQ(m[0].start, 0x7f0000000000u);
  EXPECT_EQ(m[0].end, 0x7f0000010000u);
  EXPECT_EQ(m[0].resident_kib, 40u);
  EXPECT_EQ(m[1].start, 0x7f0000010000u);
  EXPECT_EQ(m[1].resident_kib, 8u);
  EXPECT_EQ(m[2].end, 0x555500001000u);  // a path with a space
}

TEST(CleanFileMappings, LeavesEverythingWhoseContentsAreNotTheFilesOwn) {
  const std::string smaps =
      // relocated (RELRO): some pages were copied on write
      mapping("7f0000012000-7f0000014000 r--p 00012000 08:01 1234                       /usr/lib/libx.so.1", 8, 4) +
      // writable data, heap, anonymous memory, stack
      mapping("7f0000014000-7f0000015000 rw-p 00014000 08:01 1234                       /usr/lib/libx.so.1", 4, 0) +
      mapping("555500100000-555500200000 rw-p 00000000 00:00 0                          [heap]", 900, 900) +
      mapping("7f0000100000-7f0000200000 rw-p 00000000 00:00 0 ", 60, 60) +
      mapping("7ffc00000000-7ffc00021000 rw-p 00000000 00:00 0                          [stack]", 84, 84) +
      // shared: the probe's ring buffers, a shared file mapping
      mapping("7f0000300000-7f0000340000 r--s 00000000 00:0f 77                         anon_inode:bpf-map", 256, 0) +
      mapping("7f0000400000-7f0000401000 r--s 00000000 08:01 55                         /run/some.db", 4, 0) +
      // executable but writable, no access, the kernel's own
      mapping("7f0000500000-7f0000501000 rwxp 00000000 08:01 56                         /usr/lib/jit.so", 4, 0) +
      mapping("7f0000600000-7f0000601000 ---p 00000000 08:01 56                         /usr/lib/jit.so", 0, 0) +
      mapping("7ffc10000000-7ffc10002000 r-xp 00000000 00:00 0                          [vdso]", 8, 0);
  EXPECT_TRUE(clean_file_mappings(smaps).empty());
}

TEST(CleanFileMappings, WithoutAnAnonymousLineAMappingIsLeftAlone) {
  const std::string smaps =
      "7f0000000000-7f0000010000 r-xp 00000000 08:01 1234   /usr/lib/libx.so.1\nRss:   40 kB\n"
      "7f0000010000-7f0000012000 r--p 00010000 08:01 1234   /usr/lib/libx.so.1\nRss:   8 kB\nAnonymous:   x kB\n";
  EXPECT_TRUE(clean_file_mappings(smaps).empty());
}

TEST(CleanFileMappings, MalformedHeadersAndEmptyInputYieldNothing) {
  EXPECT_TRUE(clean_file_mappings("").empty());
  EXPECT_TRUE(clean_file_mappings(mapping("zz-7f0000010000 r-xp 00000000 08:01 1 /usr/lib/a.so", 4, 0)).empty());
  EXPECT_TRUE(
      clean_file_mappings(mapping("7f0000010000-7f0000000000 r-xp 00000000 08:01 1 /usr/lib/a.so", 4, 0)).empty());
  EXPECT_TRUE(clean_file_mappings(mapping("7f0000000000-7f0000010000 r-xp", 4, 0)).empty());
}

}  // namespace
}  // namespace gdw
