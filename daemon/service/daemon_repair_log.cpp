// Rate-limited repair log lines: in a fight loop every repair is still made at once, but
// the journal gets the first repair.log_burst lines of a container and then one line per
// repair.log_interval that counts the others (RepairLogLimit decides; this writes).
#include <cstdio>

#include "service/daemon.h"
#include "service/daemon_internal.h"

namespace gdw {

using namespace daemon_internal;

std::string daemon_internal::unlogged_repairs_text(std::uint64_t repairs, Clock::duration over) {
  char text[160];
  std::snprintf(text, sizeof text, "%llu more repair%s in the last %.1fs not logged (repair.log_burst, repair.log_interval)",
                static_cast<unsigned long long>(repairs), repairs == 1 ? "" : "s",
                std::chrono::duration<double>(over).count());
  return text;
}

void Daemon::schedule_repair_log_summary(Watched& w, Clock::time_point at) {
  if (!w.log_summary_timer) {
    const std::string key = w.cgroup.cgroup_dir;
    auto t = loop_->add_timer([this, key] {
      if (auto it = containers_.find(key); it != containers_.end()) log_repair_summary(it->second);
    }, "repair-log-summary");
    if (!t) return;  // add_timer logged it; the count goes out with the next line instead
    w.log_summary_timer = std::move(*t);
  }
  const auto delay = std::max(at - Clock::now(), Clock::duration::zero());
  arm_or_log(w.log_summary_timer,
             std::chrono::duration_cast<std::chrono::microseconds>(delay) + std::chrono::microseconds(1),
             "repair-log-summary");
}

void Daemon::log_repair_summary(Watched& w) {
  const auto summary = w.log_limit.take_summary(Clock::now());
  if (!summary) return;  // a later line already carried the count
  log::Fields f = fields_of(w.labels, w.cgroup.cgroup_dir);
  std::string message = "devices granted back again: " + unlogged_repairs_text(summary->unlogged, summary->since_last_line);
  if (w.last_revocation) {
    f.writer = w.last_revocation->writer;
    message += "; last revoked by " + w.last_revocation->detail;
  }
  log::info(message, f);
}

}  // namespace gdw
