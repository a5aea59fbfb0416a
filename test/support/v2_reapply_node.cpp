#include "support/v2_reapply_node.h"

#include <algorithm>
#include <cerrno>
#include <cstring>

namespace gdw::test {

const char* to_string(ReapplyStyle style) { return style == ReapplyStyle::kRunc ? "runc" : "systemd"; }

int V2ReapplyNode::reapply(const SandboxContainer& c, ReapplyStyle style) {
  if (style == ReapplyStyle::kRunc) return runc_style_reapply(c.cgroup_dir, SandboxNode::spec_rules());
  systemd_touched_.insert(c.cgroup_dir);
  return systemd_.reapply(c.cgroup_dir, SandboxNode::spec_rules());
}

const SandboxContainer& V2ReapplyNode::churn(const SandboxContainer& c) {
  SandboxContainerSpec spec = c.spec;
  spec.pod_uid.clear();
  spec.pod_name.clear();
  systemd_.forget(c.cgroup_dir);
  systemd_touched_.erase(c.cgroup_dir);
  node_.remove_container(c);
  const SandboxContainer& added = node_.add_container(spec);
  node_.write_checkpoint();
  return added;
}

std::vector<std::string> V2ReapplyNode::wanted_nodes(const SandboxContainer& c) const {
  std::vector<std::string> nodes;
  for (const auto& id : c.spec.device_ids) {
    for (int i = 0; i < 8; ++i)
      if (id == node_.gpu_uuid(i)) nodes.push_back("nvidia" + std::to_string(i));
  }
  if (!nodes.empty()) nodes.insert(nodes.end(), {"nvidiactl", "nvidia-uvm"});
  return nodes;
}

bool V2ReapplyNode::whole(const SandboxContainer& c, std::string* why) {
  const std::vector<std::string> wanted = wanted_nodes(c);
  for (const auto& name : wanted) {
    const int err = node_.open_errno(c, name);
    if (err == ENXIO) continue;
    if (why != nullptr) *why = name + ": " + (err == 0 ? "opened" : std::strerror(err));
    return false;
  }
  // And still restricted: another GPU's node stays denied (a repair only adds; a cgroup
  // left without any device program would allow it).
  for (int i = 0; i < 8; ++i) {
    const std::string other = "nvidia" + std::to_string(i);
    if (std::find(wanted.begin(), wanted.end(), other) != wanted.end()) continue;
    const int err = node_.open_errno(c, other);
    if (err == ENOENT) continue;  // no such GPU on this node
    if (err == EPERM) return true;
    if (why != nullptr) *why = other + " (not this container's): " + (err == 0 ? "opened" : std::strerror(err));
    return false;
  }
  return true;
}

std::size_t V2ReapplyNode::program_bound(const SandboxContainer& c) const {
  return 1 + (systemd_touched_.count(c.cgroup_dir) != 0 ? 1 : 0) + 1;
}

}  // namespace gdw::test
