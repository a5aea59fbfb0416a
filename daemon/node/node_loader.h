// Loading a node's inputs, the one way `run` (each resync) and `check` both do it: the
// device inventory (/proc, /dev, CDI specs), kubelet's checkpoint, the runtime bundles and
// the allocation index built from them. What the checkpoint read said comes back for the
// caller to report (the daemon logs it and sets metrics; `check` prints it).
#pragma once

#include <string>
#include <vector>

#include "core/result.h"
#include "node/node_model.h"

namespace gdw {

struct NodeLoad {
  // The checkpoint read's outcome; on an error the last good record stays in use.
  Status checkpoint;
  // What a readable checkpoint says is wrong with it: its checksum, entries dropped.
  std::vector<std::string> checkpoint_warnings;
};

// `node` must be located (NodeModel::locate). `depth`: how many bundles are read again
// (BundleIndex::refresh).
NodeLoad load_node_inputs(NodeModel& node, BundleRefreshDepth depth);

// The checkpoint's warnings alone (after a load_checkpoint() of its own).
std::vector<std::string> checkpoint_warnings(const NodeModel& node);

}  // namespace gdw
