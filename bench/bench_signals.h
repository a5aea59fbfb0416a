// How a bench stops on SIGINT/SIGTERM: the handler only sets a flag; the bench's loops call
// check_interrupted(), which throws, so every destructor on the way out runs (children
// killed by PID, cgroups removed under the sandbox's unique parent).
#pragma once

#include <signal.h>

#include <stdexcept>

namespace gdw::bench {

inline volatile sig_atomic_t g_interrupted = 0;

inline void check_interrupted() {
  if (g_interrupted) throw std::runtime_error("interrupted");
}

// No SA_RESTART: a bench blocked in waitpid() or poll() returns with EINTR and checks.
inline void install_interrupt_handlers() {
  struct sigaction sa{};
  sa.sa_handler = [](int) { g_interrupted = 1; };
  ::sigaction(SIGINT, &sa, nullptr);
  ::sigaction(SIGTERM, &sa, nullptr);
  ::signal(SIGPIPE, SIG_IGN);
}

}  // namespace gdw::bench
