// CpuHandover: after a grant the loop sleeps once per turn, not while other work is due,
// and not at all when turned off. Lower bounds on a monotonic clock are exact; the "at once"
// cases use a pause far longer than any scheduling delay.
#include "service/cpu_handover.h"

#include <gtest/gtest.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include <chrono>
#include <cstdint>

namespace gdw {
namespace {

using namespace std::chrono_literals;
using SteadyClock = std::chrono::steady_clock;

constexpr auto kLong = std::chrono::microseconds(300ms);

template <typename F>
SteadyClock::duration timed(F&& f) {
  const auto start = SteadyClock::now();
  f();
  return SteadyClock::now() - start;
}

TEST(CpuHandover, SleepsAtLeastThePauseOncePerLoopTurn) {
  CpuHandover handover;
  bool slept = false;
  EXPECT_GE(timed([&] { slept = handover.after_grant(20ms, 7, -1); }), 20ms);
  EXPECT_TRUE(slept);
  // A second grant in the same turn (a storm's next container): no second pause.
  EXPECT_LT(timed([&] { slept = handover.after_grant(kLong, 7, -1); }), 100ms);
  EXPECT_FALSE(slept);
  EXPECT_GE(timed([&] { slept = handover.after_grant(20ms, 8, -1); }), 20ms);
  EXPECT_TRUE(slept);
}

TEST(CpuHandover, NoPauseWhileRecordsWaitAndAPauseEndsWhenOneComes) {
  const int fd = ::eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
  ASSERT_GE(fd, 0);
  CpuHandover handover;
  const std::uint64_t one = 1;
  ASSERT_EQ(::write(fd, &one, sizeof one), static_cast<ssize_t>(sizeof one));
  bool slept = true;
  EXPECT_LT(timed([&] { slept = handover.after_grant(kLong, 1, fd); }), 100ms);
  EXPECT_FALSE(slept);
  // Nothing waiting: it pauses, for the whole pause.
  std::uint64_t drained = 0;
  ASSERT_EQ(::read(fd, &drained, sizeof drained), static_cast<ssize_t>(sizeof drained));
  EXPECT_GE(timed([&] { slept = handover.after_grant(20ms, 2, fd); }), 20ms);
  EXPECT_TRUE(slept);
  ::close(fd);
}

TEST(CpuHandover, OffWhenThePauseIsZero) {
  CpuHandover handover;
  EXPECT_FALSE(handover.after_grant(0us, 1, -1));
  EXPECT_FALSE(handover.after_grant(0us, 2, -1));
}

}  // namespace
}  // namespace gdw
