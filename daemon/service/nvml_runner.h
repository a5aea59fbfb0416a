// The NVML query on the event loop: `gpu-devwatch nvml-query` in a child process (NVML can
// hang forever in its init), read when it answers, killed at devices.nvml_timeout. A
// failed query is not retried for a while: a hung driver stays hung.
#pragma once

#include <functional>
#include <optional>

#include "core/clock.h"
#include "core/config.h"
#include "nvidia/nvml.h"
#include "watch/event_loop.h"

namespace gdw {

class NvmlRunner {
 public:
  // `done(answer, started)`: the answer (nothing after a failure, logged here) and when the
  // query started.
  using Done = std::function<void(std::optional<NvmlAnswer> answer, Clock::time_point started)>;
  NvmlRunner(EventLoop& loop, Done done) : loop_(loop), done_(std::move(done)) {}

  bool running() const { return query_.has_value(); }
  // Starts a query unless one runs or the back-off after a failure lasts; true while one
  // is under way.
  bool start(const Config& config);

 private:
  void finish(bool timed_out);

  EventLoop& loop_;
  Done done_;
  std::optional<NvmlQuery> query_;
  EventSource io_;
  EventSource deadline_;
  Clock::time_point next_attempt_{};
  Clock::time_point started_{};  // of the query under way or the last one
  Duration timeout_{};
};

}  // namespace gdw
