// `check --repair` never grants inside a runtime's create, as the daemon does not
// (service/apply_waits.h): a create that has not ended (its pid file not yet written while
// its bundle is new, or the runtime that wrote it still running: runtime/create_runtime.h)
// is waited for, at most repair.apply_wait_limit, looked at every 5 ms. The creates of a
// node are waited for together, so that N of them take at most one limit, not N. A
// one-shot command may block; the daemon's event loop never does.
#pragma once

#include <cstddef>
#include <functional>
#include <string>
#include <vector>

#include "core/config.h"
#include "runtime/bundles.h"

namespace gdw {

// Calls `ended(i, still_going_on)` once for each of `bundles`, as soon as its create has
// ended ("" then; a null bundle at once), or at `limit` after the first look (0: at once)
// with what still went on: its pid file not written while the bundle was less than `limit`
// old at the first look (one older without a pid file is no create going on: its runtime
// writes none there), or the pid file's process still the child of a runtime whose apply a
// grant can break (runc, crun). The creates that ended first are called first.
void wait_for_creates_end(const std::vector<const Bundle*>& bundles, Duration limit, const std::string& proc_root,
                          const std::function<void(std::size_t, std::string)>& ended);

}  // namespace gdw
