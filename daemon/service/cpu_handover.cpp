#include "service/cpu_handover.h"

#include <poll.h>

#include <cerrno>
#include <ctime>

namespace gdw {

bool CpuHandover::after_grant(std::chrono::microseconds pause, std::uint64_t loop_turn, int wake_fd) {
  if (pause.count() <= 0 || last_turn_ == loop_turn) return false;
  struct pollfd p{wake_fd, POLLIN, 0};  // a negative fd is ignored: a plain sleep
  if (wake_fd >= 0 && ::poll(&p, 1, 0) > 0) return false;
  last_turn_ = loop_turn;
  // ppoll, not nanosleep: a probe record (another container's harm) ends the pause early.
  const auto ns = std::chrono::duration_cast<std::chrono::nanoseconds>(pause).count();
  struct timespec timeout{static_cast<time_t>(ns / 1000000000), static_cast<long>(ns % 1000000000)};
  p.revents = 0;
  while (::ppoll(&p, 1, &timeout, nullptr) < 0 && errno == EINTR) {
  }
  return true;
}

}  // namespace gdw
