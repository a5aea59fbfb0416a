// The node's inputs apart from its containers: the kubepods tree's location, the device
// inventory (/proc, /dev, CDI specs), kubelet's checkpoint and the runtime bundles, held in
// the NodeModel. Their directories are watched on an inotify queue of their own; read()
// says what changed and the daemon decides what follows (service/daemon.h).
#pragma once

#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "core/config.h"
#include "core/log_once.h"
#include "metrics/daemon_metrics.h"
#include "metrics/node_metrics.h"
#include "node/node_model.h"
#include "service/watch_registry.h"
#include "watch/inotify.h"

namespace gdw {

// What a read of the input watches found changed.
struct InputChanges {
  bool overflow = false;    // events were lost: read everything again
  bool checkpoint = false;  // kubelet replaced its checkpoint
  bool inventory = false;   // a GPU node in the dev root, or a CDI spec file
  std::vector<std::string> bundles;  // container ids whose bundle directory appeared
};

class NodeInputs {
 public:
  NodeInputs(const Config& config, Metrics& metrics);
  Status start();  // the inotify queue
  int fd() const { return inotify_ ? inotify_->fd() : -1; }

  NodeModel& model() { return *node_; }
  const NodeModel& model() const { return *node_; }
  // Finds the kubepods tree once; false while it is not there (logged once).
  bool locate();
  bool located() const { return located_; }
  // Loads every input again, as a resync does (bundles as deep as `depth`), and watches
  // their directories.
  void load(BundleRefreshDepth depth);
  void reload_checkpoint();
  void reload_inventory() { node_->load_inventory(); }
  InputChanges read();

 private:
  void ensure_watches();
  void report_checkpoint(const Status& read, const std::vector<std::string>& warnings);

  const Config& config_;
  NodeMetrics metrics_;
  DaemonMetrics daemon_metrics_;
  std::unique_ptr<NodeModel> node_;
  std::optional<Inotify> inotify_;
  std::optional<WatchRegistry> watches_;
  bool located_ = false;
  LogOnce locate_error_;
};

}  // namespace gdw
