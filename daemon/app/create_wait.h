// `check --repair` never grants inside a runtime's create, as the daemon does not
// (service/apply_waits.h): a create that has not ended (its pid file not yet written while
// its bundle is new, or the runtime that wrote it still running: runtime/create_runtime.h)
// is waited for, at most repair.apply_wait_limit, looked at every 5 ms. A one-shot command
// may block; the daemon's event loop never does.
#pragma once

#include <string>

#include "core/config.h"
#include "runtime/bundles.h"

namespace gdw {

// Waits while `bundle`'s create goes on, at most `limit` (0: not at all): its pid file not
// written, the bundle less than `limit` old at the first look (one older without a pid file
// is no create going on: its runtime writes none there), or the pid file's process still
// the child of a runtime whose apply a grant can break (runc, crun). "" when the create
// ended (or never went on), else what still went on when the limit came.
std::string wait_for_create_end(const Bundle& bundle, Duration limit, const std::string& proc_root);

}  // namespace gdw
