// Dropping this process's clean file mappings (memory/resident_pages.h) lowers its
// file-backed RSS, and the code and read-only data it dropped still work afterwards.
#include "memory/resident_pages.h"

#include <gtest/gtest.h>

#include <fstream>
#include <regex>
#include <sstream>
#include <string>

namespace gdw {
namespace {

long status_kib(const std::string& field) {
  std::ifstream in("/proc/self/status");
  std::string line;
  while (std::getline(in, line))
    if (line.rfind(field + ":", 0) == 0) return std::stol(line.substr(field.size() + 1));
  return -1;
}

TEST(ReleaseStartupMemory, LowersFileBackedRssAndTheProcessKeepsWorking) {
  const long before = status_kib("RssFile");
  ASSERT_GT(before, 0);
  auto released = release_startup_memory();
  ASSERT_TRUE(released) << released.error().message;
  EXPECT_GT(released->file_kib, 0u);
  const long after = status_kib("RssFile");
  EXPECT_LT(after, before) << "RssFile " << before << " kB -> " << after << " kB, released " << released->file_kib;

  // Library code and read-only data dropped above fault back in: regex (libstdc++),
  // iostreams and the locale tables give the same answers as ever.
  std::smatch m;
  const std::string text = "c 195:255 rw";
  ASSERT_TRUE(std::regex_match(text, m, std::regex(R"(c (\d+):(\d+) (r?w?m?))")));
  EXPECT_EQ(m[1], "195");
  EXPECT_EQ(m[2], "255");
  std::ostringstream out;
  out << std::hex << 0xc3 << ' ' << 2.5;
  EXPECT_EQ(out.str(), "c3 2.5");
  EXPECT_EQ(status_kib("Threads"), 1);  // /proc and ifstream still read

  // A second release finds only what was touched since: far less.
  auto again = release_startup_memory();
  ASSERT_TRUE(again) << again.error().message;
  EXPECT_LT(again->file_kib, released->file_kib);
}

}  // namespace
}  // namespace gdw
