// The thread that loads device programs off the event loop (backend/program_load_thread):
// what it hands back, its bound, a grant that needs a load now, and that no fd it loaded is
// left open. Its load function here opens /dev/null (an fd to account for) and can be held
// mid-load; the real BPF_PROG_LOAD is the privileged tests' (device_program_cache_test,
// v2_load_during_apply_test).
#include "backend/program_load_thread.h"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <thread>

namespace gdw::test {
namespace {

using namespace std::chrono_literals;

std::atomic<bool> g_hold{false};      // loads wait while true
std::atomic<int> g_loading{0};        // loads under way
std::atomic<int> g_opened{-1};        // the last fd a load returned

Result<int> fake_load(const BpfCode& code, const std::string& what) {
  ++g_loading;
  while (g_hold.load()) std::this_thread::sleep_for(100us);
  --g_loading;
  if (code.empty()) return Error{"nothing to load: " + what, EINVAL};
  const int fd = ::open("/dev/null", O_RDONLY | O_CLOEXEC);
  g_opened = fd;
  return fd;
}

BpfCode code_of(int n) { return BpfCode(static_cast<std::size_t>(n), bpf_insn{}); }

bool is_open(int fd) { return ::fcntl(fd, F_GETFD) != -1; }

// Polls take_done() until `n` loads came back (or 5 s).
std::vector<ProgramLoadThread::Loaded> take(ProgramLoadThread& thread, std::size_t n) {
  std::vector<ProgramLoadThread::Loaded> all;
  for (int i = 0; i < 5000 && all.size() < n; ++i) {
    for (auto& d : thread.take_done()) all.push_back(std::move(d));
    if (all.size() < n) std::this_thread::sleep_for(1ms);
  }
  return all;
}

class ProgramLoadThreadTest : public ::testing::Test {
 protected:
  void SetUp() override { g_hold = false; }
  void TearDown() override { g_hold = false; }
};

TEST_F(ProgramLoadThreadTest, StartsOnTheFirstLoadAndHandsBackEachLoadUnderItsKey) {
  ProgramLoadThread thread(&fake_load);
  EXPECT_FALSE(thread.started()) << "nothing asked for: no thread (a v1 node never starts one)";
  ASSERT_TRUE(thread.submit("a", code_of(2), "wrapper a"));
  ASSERT_TRUE(thread.submit("b", code_of(0), "wrapper b"));
  EXPECT_TRUE(thread.started());
  auto done = take(thread, 2);
  ASSERT_EQ(done.size(), 2u);
  EXPECT_EQ(done[0].key, "a");
  ASSERT_TRUE(done[0].fd.ok());
  EXPECT_TRUE(is_open(*done[0].fd));
  ::close(*done[0].fd);
  EXPECT_EQ(done[1].key, "b");
  ASSERT_FALSE(done[1].fd.ok()) << "a load that fails comes back as its error";
  EXPECT_NE(done[1].fd.error().message.find("wrapper b"), std::string::npos) << done[1].fd.error().message;
  EXPECT_FALSE(thread.has("a")) << "taken: no longer the thread's";
}

TEST_F(ProgramLoadThreadTest, AKeyIsLoadedOnceAndAtMostEightLoadsAreHeld) {
  g_hold = true;
  ProgramLoadThread thread(&fake_load);
  ASSERT_TRUE(thread.submit("k0", code_of(1), "w"));
  EXPECT_FALSE(thread.submit("k0", code_of(1), "w")) << "queued or loading already";
  for (std::size_t i = 1; i < ProgramLoadThread::kMaxQueued; ++i)
    EXPECT_TRUE(thread.submit("k" + std::to_string(i), code_of(1), "w")) << i;
  EXPECT_FALSE(thread.submit("one more", code_of(1), "w")) << "the bound";
  g_hold = false;
  auto done = take(thread, ProgramLoadThread::kMaxQueued);
  EXPECT_EQ(done.size(), ProgramLoadThread::kMaxQueued);
  for (auto& d : done)
    if (d.fd.ok()) ::close(*d.fd);
  EXPECT_TRUE(thread.submit("one more", code_of(1), "w")) << "room again once taken";
  auto last = take(thread, 1);
  ASSERT_EQ(last.size(), 1u);
  if (last[0].fd.ok()) ::close(*last[0].fd);
}

TEST_F(ProgramLoadThreadTest, AGrantThatNeedsALoadUnderWayWaitsForItButNotPastItsLimit) {
  g_hold = true;
  ProgramLoadThread thread(&fake_load);
  ASSERT_TRUE(thread.submit("under way", code_of(1), "w"));
  ASSERT_TRUE([&] {
    for (int i = 0; i < 5000 && g_loading == 0; ++i) std::this_thread::sleep_for(1ms);
    return g_loading == 1;
  }());
  const auto start = std::chrono::steady_clock::now();
  EXPECT_FALSE(thread.take_over("under way", 20ms)) << "still loading at the limit";
  EXPECT_GE(std::chrono::steady_clock::now() - start, 20ms);
  std::thread release([] {
    std::this_thread::sleep_for(10ms);
    g_hold = false;
  });
  EXPECT_TRUE(thread.take_over("under way", 5s)) << "done within the limit: waited for";
  release.join();
  auto done = thread.take_done();
  ASSERT_EQ(done.size(), 1u);
  ASSERT_TRUE(done[0].fd.ok());
  ::close(*done[0].fd);
}

TEST_F(ProgramLoadThreadTest, AGrantThatNeedsALoadStillQueuedTakesItOutAndLoadsItself) {
  g_hold = true;
  ProgramLoadThread thread(&fake_load);
  ASSERT_TRUE(thread.submit("first", code_of(1), "w"));
  ASSERT_TRUE(thread.submit("queued", code_of(1), "w"));
  const auto start = std::chrono::steady_clock::now();
  EXPECT_FALSE(thread.take_over("queued", 5s));
  EXPECT_LT(std::chrono::steady_clock::now() - start, 1s) << "no wait for a load that has not begun";
  EXPECT_FALSE(thread.has("queued"));
  g_hold = false;
  auto done = take(thread, 1);
  ASSERT_EQ(done.size(), 1u);
  EXPECT_EQ(done[0].key, "first");
  if (done[0].fd.ok()) ::close(*done[0].fd);
  std::this_thread::sleep_for(20ms);
  EXPECT_TRUE(thread.take_done().empty()) << "the one taken out was never loaded";
}

TEST_F(ProgramLoadThreadTest, WhatWasLoadedAndNeverTakenIsClosedWithTheThread) {
  int fd = -1;
  {
    g_opened = -1;
    ProgramLoadThread thread(&fake_load);
    ASSERT_TRUE(thread.submit("left", code_of(1), "w"));
    for (int i = 0; i < 5000 && g_opened < 0; ++i) std::this_thread::sleep_for(1ms);
    ASSERT_TRUE(thread.take_over("left", 5s)) << "loaded, or under way";
    fd = g_opened;
    ASSERT_GE(fd, 0);
    EXPECT_TRUE(is_open(fd));
  }
  EXPECT_FALSE(is_open(fd)) << "fd " << fd << " left open";
}

}  // namespace
}  // namespace gdw::test
