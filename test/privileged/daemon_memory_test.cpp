// The real daemon's memory once it is ready: the clean file pages only startup touched are
// no longer resident, helper threads share one malloc arena, and everything it dropped
// still works (/metrics answers, a revocation is repaired).
#include <gtest/gtest.h>

#include <cerrno>
#include <fstream>
#include <regex>
#include <string>
#include <thread>
#include <vector>

#include "support/daemon_fixture.h"

namespace gdw::test {
namespace {

long status_kib(pid_t pid, const std::string& field) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/status");
  std::string line;
  while (std::getline(in, line))
    if (line.rfind(field + ":", 0) == 0) return std::stol(line.substr(field.size() + 1));
  return -1;
}

// glibc's per-thread arenas live in 64 MiB-aligned reservations: an anonymous rw-p mapping
// starting on a 64 MiB boundary, its unused rest ---p right after it.
int thread_arenas(pid_t pid) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/maps");
  std::string line;
  int n = 0;
  while (std::getline(in, line)) {
    unsigned long start = 0, end = 0;
    char perms[5] = {};
    unsigned long inode = 1;
    if (std::sscanf(line.c_str(), "%lx-%lx %4s %*x %*s %lu", &start, &end, perms, &inode) != 4) continue;
    if (inode == 0 && std::string(perms) == "rw-p" && start % (64ul << 20) == 0 && line.find('[') == std::string::npos)
      ++n;
  }
  return n;
}

TEST_F(DaemonWithTrainerTest, OnceReadyStartupOnlyFilePagesAreDroppedAndWhatIsUsedStillWorks) {
  ASSERT_TRUE(daemon_->start()) << daemon_->output();
  const pid_t pid = daemon_->process().pid();
  ASSERT_TRUE(eventually([&] { return daemon_->output().find("KiB of startup-only file pages") != std::string::npos; }))
      << daemon_->output();
  std::smatch m;
  const std::string out = daemon_->output();
  ASSERT_TRUE(std::regex_search(out, m, std::regex(R"(released (\d+) KiB of startup-only file pages)"))) << out;
  EXPECT_GT(std::stol(m[1]), 4096) << "linking gRPC, protobuf, OpenSSL and libcurl alone touches more";
  // Before this, the daemon kept ~21 MiB of file pages resident; what it uses is ~5-8 MiB.
  EXPECT_LT(status_kib(pid, "RssFile"), 12 * 1024);

  // Scrapes from several threads at once: the HTTP workers allocate, in the one arena.
  std::vector<std::thread> scrapers;
  for (int i = 0; i < 8; ++i)
    scrapers.emplace_back([&] {
      for (int k = 0; k < 5; ++k)
        EXPECT_NE(daemon_->metrics().find("gpu_devwatch_containers_watched 1"), std::string::npos);
    });
  for (auto& t : scrapers) t.join();
  EXPECT_EQ(thread_arenas(pid), 0);

  node_->reapply_spec(*c_);  // deny `a`, then the spec's allows: the GPU is gone
  EXPECT_TRUE(daemon_->eventually_errno(*c_, "nvidia0", ENXIO)) << daemon_->output();
}

}  // namespace
}  // namespace gdw::test
