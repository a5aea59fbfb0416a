// The daemon's own metrics: errors in its event handlers, full resyncs, inotify
// overflows, configuration reloads.
// A view on the one Metrics registry (metrics.h): cheap to copy, valid while it lives.
#pragma once

#include <string>

namespace gdw {

class Metrics;

class DaemonMetrics {
 public:
  explicit DaemonMetrics(Metrics& metrics) : m_(&metrics) {}

  void event_loop_error(const std::string& source);
  void resync(const std::string& reason, double seconds);
  void inotify_overflow();
  void config_reload(bool success);

 private:
  Metrics* m_;
};

}  // namespace gdw
