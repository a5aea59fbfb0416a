// Re-appliers at work on a cgroup v2 SandboxNode: runc-style and systemd-style re-applies
// of a container's spec (test/support/device_program_tools.h), container churn (a pod goes,
// another comes with a new id and bundle), and what a GPU container must have ("whole":
// every wanted node opens with ENXIO from inside its cgroup, and another GPU's node is
// still denied).
#pragma once

#include <cstddef>
#include <set>
#include <string>
#include <vector>

#include "support/device_program_tools.h"
#include "support/sandbox_node.h"

namespace gdw::test {

enum class ReapplyStyle { kRunc, kSystemd };
const char* to_string(ReapplyStyle style);

class V2ReapplyNode {
 public:
  explicit V2ReapplyNode(SandboxNode& node) : node_(node) {}

  // Re-applies the container's spec (SandboxNode::spec_rules(): no GPU) as `style` does;
  // returns errno (0 = the new program is attached).
  int reapply(const SandboxContainer& c, ReapplyStyle style);
  // Removes `c` (process, cgroup, bundle) and adds a container of the same kind in a new
  // pod; the checkpoint is rewritten. `c` is gone afterwards: use the returned one.
  const SandboxContainer& churn(const SandboxContainer& c);

  // The device nodes a GPU container must open: its GPUs, nvidiactl, nvidia-uvm.
  std::vector<std::string> wanted_nodes(const SandboxContainer& c) const;
  // Whether every wanted node opens with ENXIO from inside the container's cgroup and
  // another GPU's node is still denied (EPERM); the first that is not in *why ("nvidia0:
  // EPERM").
  bool whole(const SandboxContainer& c, std::string* why = nullptr);
  // The most programs the container's cgroup may hold: one per re-applier that attached
  // there (the runtime always; systemd once it re-applied) plus one wrapper.
  std::size_t program_bound(const SandboxContainer& c) const;

 private:
  SandboxNode& node_;
  SystemdStyleReapplier systemd_;
  std::set<std::string> systemd_touched_;  // cgroup dirs
};

}  // namespace gdw::test
