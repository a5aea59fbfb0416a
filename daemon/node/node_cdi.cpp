// NodeModel's CDI input: the spec files of cdi.spec_dirs and the host nodes they name.
#include <algorithm>

#include "cdi/cdi_spec.h"
#include "node/node_model.h"

namespace gdw {

void NodeModel::load_cdi(Inventory& fresh) {
  CdiRegistry registry = load_cdi_registry(config_.cdi.spec_dirs);
  cdi_errors_ = std::move(registry.errors);
  cdi_spec_files_ = registry.spec_files;
  // Nodes without major/minor in the spec: their host path's stat() under the dev root
  // decides (char devices only), as for a DeviceSpec.
  std::vector<std::string> names;
  for (const auto& [name, nodes] : registry.devices) {
    for (const auto& node : nodes) {
      if (node.number || node.host_path.rfind("/dev/", 0) != 0) continue;
      std::string rel = node.host_path.substr(5);
      if (!fresh.dev_nodes.count(rel)) names.push_back(std::move(rel));
    }
  }
  std::sort(names.begin(), names.end());
  names.erase(std::unique(names.begin(), names.end()), names.end());
  if (!names.empty()) add_dev_nodes(fresh, config_.devices.dev_root, names);
  fresh.cdi_devices = std::move(registry.devices);
}

}  // namespace gdw
