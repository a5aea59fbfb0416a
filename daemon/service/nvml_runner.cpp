#include "service/nvml_runner.h"

#include <sys/epoll.h>

#include "log/log.h"
#include "node/self_exe.h"

namespace gdw {
namespace {

constexpr Clock::duration kRetryAfterFailure = std::chrono::minutes(5);

}  // namespace

bool NvmlRunner::start(const Config& config) {
  if (query_) return true;
  if (Clock::now() < next_attempt_) return false;
  auto q = NvmlQuery::start(self_exe(), config.devices.nvml_library);
  if (!q) {
    log::warn("cannot ask NVML for MIG devices: " + q.error().message);
    next_attempt_ = Clock::now() + kRetryAfterFailure;
    return false;
  }
  query_.emplace(std::move(*q));
  started_ = Clock::now();
  timeout_ = config.devices.nvml_timeout;
  auto io = loop_.add_io(query_->fd(), EPOLLIN | EPOLLHUP, [this](std::uint32_t) {
    if (query_ && query_->read_available()) finish(false);
  }, "nvml");
  auto deadline = loop_.add_timer([this] { finish(true); }, "nvml-deadline",
                                  std::chrono::duration_cast<std::chrono::microseconds>(config.devices.nvml_timeout));
  if (!io || !deadline) {
    query_.reset();
    return false;
  }
  io_ = std::move(*io);
  deadline_ = std::move(*deadline);
  return true;
}

void NvmlRunner::finish(bool timed_out) {
  io_ = EventSource();
  deadline_ = EventSource();
  std::optional<NvmlAnswer> answer;
  if (timed_out) {
    query_->kill();
    log::warn("NVML did not answer within " + format_duration(timeout_) +
              " (child killed); MIG devices stay unmapped — set devices.mig_map to map them");
    next_attempt_ = Clock::now() + kRetryAfterFailure;
  } else if (auto a = query_->finish(); a) {
    log::info("NVML reported " + std::to_string(a->migs.size()) + " MIG device(s)");
    answer = std::move(*a);
  } else {
    log::warn("NVML query failed: " + a.error().message);
    next_attempt_ = Clock::now() + kRetryAfterFailure;
  }
  // Done before the callback runs: it may ask for the next query at once.
  query_.reset();
  done_(std::move(answer), started_);
}

}  // namespace gdw
