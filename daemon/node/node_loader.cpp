#include "node/node_loader.h"

namespace gdw {

std::vector<std::string> checkpoint_warnings(const NodeModel& node) {
  std::vector<std::string> out;
  const auto& cp = node.checkpoint().checkpoint;
  if (!cp.checksum_valid) {
    out.push_back("kubelet checkpoint checksum does not verify (stored " + std::to_string(cp.stored_checksum) +
                  ", computed " + std::to_string(cp.computed_checksum) + "); its entries are " +
                  (node.checkpoint().used ? "used" : "ignored (kubelet.on_invalid_checksum: ignore)"));
  }
  for (const auto& e : cp.entry_errors)
    out.push_back("kubelet checkpoint entry " + std::to_string(e.index) + " (pod " + e.pod_uid + ", container " +
                  e.container_name + "): " + e.message);
  return out;
}

NodeLoad load_node_inputs(NodeModel& node, BundleRefreshDepth depth) {
  NodeLoad load;
  node.load_inventory();
  load.checkpoint = node.load_checkpoint();
  if (load.checkpoint) load.checkpoint_warnings = checkpoint_warnings(node);
  node.bundles().refresh(depth);
  node.rebuild_allocations();  // PodResources entries map to pods through the bundles
  return load;
}

}  // namespace gdw
