// /proc/cgroups: which v1 hierarchy each controller is mounted on. The probe's cgroup_mkdir
// events name a hierarchy by this id (cgroup2 is 0), so the daemon needs the devices
// controller's id to know that a created directory is in the tree it watches.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "core/result.h"

namespace gdw {

struct ProcCgroupsEntry {
  std::string controller;
  std::uint32_t hierarchy = 0;  // 0: on no v1 hierarchy (bound to cgroup2, or unmounted)
  std::uint64_t cgroups = 0;
  bool enabled = false;
};

// Parses the file's text: a '#' header, then one whitespace-separated line per controller
// (subsys_name, hierarchy, num_cgroups, enabled). A malformed line is an error naming it.
Result<std::vector<ProcCgroupsEntry>> parse_proc_cgroups(std::string_view text);

// The v1 hierarchy id of `controller`; an error when it is absent, disabled or on no v1
// hierarchy.
Result<std::uint32_t> v1_hierarchy_id(const std::vector<ProcCgroupsEntry>& entries, std::string_view controller);

// Reads <proc_root>/cgroups and answers v1_hierarchy_id for `controller`; errors name the path.
Result<std::uint32_t> read_v1_hierarchy_id(const std::string& proc_root, std::string_view controller);

}  // namespace gdw
