// Running programs from tests: the real gpu-devwatch binary, runc, helpers.
#pragma once

#include <sys/types.h>

#include <chrono>
#include <memory>
#include <string>
#include <vector>

#include "support/temp_dir.h"

namespace gdw::test {

using namespace std::chrono_literals;

struct CommandResult {
  int exit_code = -1;  // -1 when killed by a signal or timed out
  bool timed_out = false;
  std::string out;
  std::string err;
};

// Runs argv[0] (PATH searched) with extra "K=V" environment entries; kills it at the
// timeout. stdin is /dev/null.
CommandResult run_command(const std::vector<std::string>& argv, std::chrono::milliseconds timeout = 60s,
                          const std::vector<std::string>& extra_env = {});

// A long-running child (the daemon) whose combined output goes to a log file.
class BackgroundProcess {
 public:
  BackgroundProcess(const std::vector<std::string>& argv, const std::vector<std::string>& extra_env = {});
  ~BackgroundProcess();  // SIGKILL by PID if still running
  BackgroundProcess(const BackgroundProcess&) = delete;
  BackgroundProcess& operator=(const BackgroundProcess&) = delete;

  pid_t pid() const { return pid_; }
  bool running();
  std::string output() const;  // everything written so far
  void signal(int sig);
  // Waits for exit; returns the exit code, or -1 (signal) / -2 (timeout).
  int wait(std::chrono::milliseconds timeout = 10s);
  // Polls output() until it contains `needle` or the timeout passes.
  bool wait_for_output(const std::string& needle, std::chrono::milliseconds timeout = 10s);

 private:
  TempDir dir_{"gdw-proc"};
  std::string log_path_;
  pid_t pid_ = -1;
  int status_ = 0;
  bool reaped_ = false;
};

bool is_root();
// Polls `pred` every ms until true or timeout.
template <class Pred>
bool eventually(Pred pred, std::chrono::milliseconds timeout = 5s) {
  auto end = std::chrono::steady_clock::now() + timeout;
  while (std::chrono::steady_clock::now() < end) {
    if (pred()) return true;
    struct timespec ts{0, 1'000'000};
    nanosleep(&ts, nullptr);
  }
  return pred();
}

// A TCP connection to 127.0.0.1:<port> (reads time out after `receive_timeout_s` when > 0);
// -1 on failure.
int connect_loopback(int port, int receive_timeout_s = 0);
// GET http://127.0.0.1:<port><path> with a plain socket; returns the body, "" on failure.
std::string http_get(int port, const std::string& path = "/metrics");
// A free TCP port on 127.0.0.1, from below the kernel's ephemeral range (never one a
// bind to port 0 can be given meanwhile).
int free_port();

}  // namespace gdw::test
