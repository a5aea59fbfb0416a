// `check --repair` never grants inside a runtime's apply, as the daemon does not
// (service/apply_waits.h). It has no probe to name the writer, so it looks for the applies
// that can be going on. First, together for all containers of the node: a create that has
// not ended (its pid file not yet written while its bundle is new, or the runtime that
// wrote it still running: runtime/create_runtime.h), looked at every 5 ms, so that N of
// them take at most one repair.apply_wait_limit, not N. Then, inside each container's
// repair step: a runc or crun creating or updating it by its command line, or still
// exiting (runtime/runtime_applies.h), until the same limit. A one-shot command may block;
// the daemon's event loop never does.
#pragma once

#include <chrono>
#include <cstddef>
#include <functional>
#include <string>
#include <vector>

#include "core/config.h"
#include "runtime/bundles.h"

namespace gdw {

// Where runtime processes are looked for.
struct RuntimeProcesses {
  std::string proc_root;
  std::string cgroup_controller;  // whose hierarchy the containers are in: "" (v2) or "devices"
  // Whether a cgroup path (relative to that hierarchy's root) is a container's or below one.
  std::function<bool(const std::string&)> in_a_container;
};

// Calls `ended(i, still_going_on)` once for each of `bundles`, as soon as its create has
// ended ("" then; a null bundle at once), or at `limit` after the first look (0: at once)
// with what still went on: its pid file not written while the bundle was less than `limit`
// old at the first look (one older without a pid file is no create going on: its runtime
// writes none there), or the pid file's process still the child of a runtime whose apply a
// grant can break (runc, crun). The creates that ended first are called first.
void wait_for_creates_end(const std::vector<const Bundle*>& bundles, Duration limit, const std::string& proc_root,
                          const std::function<void(std::size_t, std::string)>& ended);

// A runtime's create or update of one container, looked for again before its grant
// (repair_once's `apply_going_on`: after the look that found devices missing, so an apply
// that took them is found) and waited for, until `deadline`, the one all containers share.
struct ContainerApplies {
  const Bundle& bundle;
  std::chrono::steady_clock::time_point deadline;
  const RuntimeProcesses& processes;

  // One look: what of a runtime's create or update of the container goes on now, or "".
  std::string going_on() const;
  // Until none goes on, or the deadline: what still went on then, or "".
  std::string wait_for_end() const;
};

}  // namespace gdw
