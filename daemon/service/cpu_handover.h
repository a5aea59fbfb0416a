// After a grant, the event loop thread gives its CPU away for a moment before it reports.
//
// A repair's wake-up usually preempts the task that made the harm on the daemon's CPU (the
// probe's record wakes the loop inside that task's attach or write, and the loop's short
// slice preempts it as the call returns). On a node whose tasks share CPUs that task, or a
// GPU tenant queued behind it, would then wait for the whole repair: the grant, and after
// it the grant's own look, the log line, the metrics and the writer's attribution (on a
// 2-vCPU VM about 65 % of the burst came after the attach). A short sleep once the grant
// is made (v2: after the grant's own look, which is part of it) lets it run first and find
// its devices back; the report follows. Once per loop turn, and not while the
// probe has records waiting (another repair is due at once): bounded, whatever a tenant
// does. Figures: docs/performance.md, "Handing the CPU back after a grant".
#pragma once

#include <chrono>
#include <cstdint>
#include <optional>

namespace gdw {

class CpuHandover {
 public:
  // `pause`: how long (the kernel adds its timer slack, 50 us for a fair thread); 0: never.
  // `loop_turn`: the event loop's iteration; `wake_fd`: readable when other work is due (the
  // probe's records; -1: none). Returns whether it slept.
  bool after_grant(std::chrono::microseconds pause, std::uint64_t loop_turn, int wake_fd);

 private:
  std::optional<std::uint64_t> last_turn_;
};

}  // namespace gdw
