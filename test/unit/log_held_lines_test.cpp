// The text log's sink (log/held_lines_sink.h): with its writer thread, lines are written in
// batches, warnings at once; nothing is lost, nothing is reordered, and a logger never
// writes itself.
#include <dirent.h>
#include <fcntl.h>
#include <sched.h>
#include <unistd.h>

#include <gtest/gtest.h>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <chrono>
#include <fstream>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "log/held_lines_sink.h"
#include "support/process.h"

namespace gdw::log {
namespace {

using namespace std::chrono_literals;
using test::eventually;

// The scheduling policy of this process's thread named `name`, if there is one (asked of the
// kernel by thread id: /proc's stat is not what qemu-user shows of an arm64 run).
std::optional<int> policy_of_thread(const std::string& name) {
  DIR* dir = ::opendir("/proc/self/task");
  if (dir == nullptr) return std::nullopt;
  std::optional<int> policy;
  while (dirent* e = ::readdir(dir)) {
    if (e->d_name[0] == '.') continue;
    std::string comm;
    std::getline(std::ifstream(std::string("/proc/self/task/") + e->d_name + "/comm"), comm);
    if (comm == name) policy = ::sched_getscheduler(static_cast<pid_t>(std::stoi(e->d_name)));
  }
  ::closedir(dir);
  return policy;
}

class HeldLines : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_EQ(::pipe2(fds_.data(), O_NONBLOCK | O_CLOEXEC), 0);
    sink_ = std::make_shared<HeldLinesSink>(fds_[1]);
    logger_ = std::make_shared<spdlog::logger>("held-lines-test", sink_);
    logger_->set_pattern("%l %v");
    logger_->set_level(spdlog::level::trace);
  }
  void TearDown() override {
    sink_->stop_writer();
    ::close(fds_[0]);
    ::close(fds_[1]);
  }
  // Everything written to the pipe since the last call (the reader never waits).
  std::string written() {
    std::array<char, 65536> buf;
    for (ssize_t n; (n = ::read(fds_[0], buf.data(), buf.size())) > 0;) out_.append(buf.data(), static_cast<std::size_t>(n));
    return std::exchange(out_, {});
  }
  // Keeps reading until `text` arrived (or `timeout` passed); what arrived.
  std::string written_once(const std::string& text, std::chrono::milliseconds timeout) {
    std::string got;
    eventually([&] { return (got += written()).find(text) != std::string::npos; }, timeout);
    return got;
  }

  std::array<int, 2> fds_{};
  std::string out_;
  std::shared_ptr<HeldLinesSink> sink_;
  std::shared_ptr<spdlog::logger> logger_;
};

TEST_F(HeldLines, WithoutTheWriterEachLineIsWrittenByItsCaller) {
  logger_->info("one");
  EXPECT_EQ(written(), "info one\n");
  logger_->debug("two");
  EXPECT_EQ(written(), "debug two\n");
}

TEST_F(HeldLines, ABatchWaitsForItsHoldThenComesOutWholeAndInOrder) {
  sink_->start_writer(std::chrono::microseconds(300ms));
  const auto start = std::chrono::steady_clock::now();
  logger_->info("granted back nvidia0");
  logger_->info("granted back nvidia1");
  std::this_thread::sleep_for(50ms);
  EXPECT_EQ(written(), "") << "held for the rest of its batch";
  const std::string got = written_once("nvidia1", 5s);
  EXPECT_EQ(got, "info granted back nvidia0\ninfo granted back nvidia1\n");
  EXPECT_GE(std::chrono::steady_clock::now() - start, 250ms);
}

TEST_F(HeldLines, AWarningIsWrittenWithoutWaitingAfterWhatCameBefore) {
  sink_->start_writer(std::chrono::microseconds(60s));
  logger_->info("held");
  logger_->warn("cannot grant");
  EXPECT_EQ(written_once("cannot grant", 5s), "info held\nwarning cannot grant\n");
}

TEST_F(HeldLines, FlushAndStopWriteEverythingPending) {
  sink_->start_writer(std::chrono::microseconds(60s));
  logger_->info("first");
  logger_->flush();
  EXPECT_EQ(written(), "info first\n") << "flush() returns once it is written";
  logger_->info("second");
  sink_->stop_writer();
  EXPECT_EQ(written(), "info second\n");
  logger_->info("third");
  EXPECT_EQ(written(), "info third\n") << "written by the caller again";
}

TEST_F(HeldLines, LinesFromManyThreadsAreAllWrittenEachOnItsOwnLine) {
  sink_->start_writer(std::chrono::microseconds(2ms));
  constexpr int kThreads = 4, kLines = 2000;
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t)
    threads.emplace_back([&, t] {
      for (int i = 0; i < kLines; ++i) logger_->info("thread {} line {}", t, i);
    });
  std::string got;
  std::thread reader([&] {  // the pipe holds 64 KiB: keep it drained
    eventually([&] {
      got += written();
      return std::count(got.begin(), got.end(), '\n') >= kThreads * kLines;
    }, 20s);
  });
  for (auto& th : threads) th.join();
  reader.join();
  ASSERT_EQ(std::count(got.begin(), got.end(), '\n'), kThreads * kLines);
  for (int t = 0; t < kThreads; ++t) {
    std::size_t at = 0;  // each thread's lines in its own order
    for (int i = 0; i < kLines; ++i) {
      const std::string line = "info thread " + std::to_string(t) + " line " + std::to_string(i) + "\n";
      const std::size_t found = got.find(line, at);
      ASSERT_NE(found, std::string::npos) << line;
      ASSERT_TRUE(found == 0 || got[found - 1] == '\n') << line;
      at = found + line.size();
    }
  }
}

TEST_F(HeldLines, PastTheLimitALoggerWaitsForTheWriterInsteadOfGrowing) {
  // Nobody reads the pipe: the writer blocks once it is full (with one batch of up to the
  // limit in hand), pending lines reach the limit, and the logging thread then waits (as a
  // direct write would) until lines drain.
  const int flags = ::fcntl(fds_[1], F_GETFL);
  ASSERT_EQ(::fcntl(fds_[1], F_SETFL, flags & ~O_NONBLOCK), 0);
  sink_->start_writer(std::chrono::microseconds(1ms));
  const std::string line(1000, 'x');
  const std::size_t lines = 3 * HeldLinesSink::kMaxPending / line.size();
  std::atomic<std::size_t> logged = 0;
  std::thread logger([&] {
    for (std::size_t i = 0; i < lines; ++i, ++logged) logger_->info(line);
  });
  std::this_thread::sleep_for(500ms);
  EXPECT_LT(logged.load(), lines) << "the logger did not wait";
  EXPECT_GT(logged.load(), HeldLinesSink::kMaxPending / (line.size() + 6));
  std::size_t got = 0;
  std::string text;
  eventually([&] {
    text = written();
    got += static_cast<std::size_t>(std::count(text.begin(), text.end(), '\n'));
    return got >= lines;
  }, 20s);
  logger.join();
  EXPECT_EQ(got, lines);
}

// Waking the writer must not preempt the thread that logged (the event loop, mid-repair):
// the writer runs as SCHED_BATCH, the logging thread keeps its own policy.
TEST_F(HeldLines, TheWriterRunsAsBatchSoAHandOverNeverPreemptsTheLogger) {
  ASSERT_EQ(::sched_getscheduler(0), SCHED_OTHER);
  ASSERT_TRUE(sink_->start_writer(1ms));
  logger_->info("one");  // the writer has run by the time this is written
  ASSERT_NE(written_once("info one\n", 5s).find("info one\n"), std::string::npos);
  EXPECT_EQ(policy_of_thread("log-writer"), SCHED_BATCH);
  EXPECT_EQ(::sched_getscheduler(0), SCHED_OTHER);
}

// A policy an operator chose for the daemon (inherited by its threads) is left as it is.
TEST_F(HeldLines, AWriterStartedUnderAnotherPolicyKeepsIt) {
  std::optional<int> writer_policy;
  std::thread starter([&] {
    sched_param none{};
    if (::sched_setscheduler(0, SCHED_IDLE, &none) != 0) return;
    if (!sink_->start_writer(1ms)) return;
    logger_->info("two");
    eventually([&] { return written().find("info two") != std::string::npos; }, 5s);
    writer_policy = policy_of_thread("log-writer");
  });
  starter.join();
  EXPECT_EQ(writer_policy, SCHED_IDLE);
}

}  // namespace
}  // namespace gdw::log
