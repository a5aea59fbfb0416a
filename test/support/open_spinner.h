// A tenant's process polling its GPU: a child process inside a container's cgroup that
// opens device nodes in a tight loop and counts the opens denied with EPERM, by phase (the
// test sets the phase as it goes: "reload 7", "runc update", ...), with the longest
// unbroken run of denied rounds. An allowed mknod'ed node without a driver gives ENXIO.
//
// The counts live in a shared anonymous mapping, so the test reads them while the child
// runs; the child makes only system calls (it is forked from a test process).
#pragma once

#include <sys/types.h>

#include <atomic>
#include <cstdint>
#include <string>
#include <vector>

namespace gdw::test {

class OpenSpinner {
 public:
  static constexpr int kMaxPhases = 128;
  struct PhaseStats {
    std::uint64_t opens = 0;
    std::uint64_t denied = 0;           // opens that failed with EPERM
    std::int64_t longest_denial_ns = 0;  // the longest run of rounds with a denied open
  };

  // Starts the child in `cgroup_dir`; check error().
  OpenSpinner(const std::string& cgroup_dir, const std::vector<std::string>& nodes);
  ~OpenSpinner();  // stop()
  OpenSpinner(const OpenSpinner&) = delete;
  OpenSpinner& operator=(const OpenSpinner&) = delete;

  const std::string& error() const { return error_; }
  pid_t pid() const { return pid_; }
  // Opens from now on count for `phase` (0 ≤ phase < kMaxPhases); a denial run counts for
  // the phase it began in.
  void set_phase(int phase);
  PhaseStats stats(int phase) const;
  std::uint64_t rounds() const;
  // Ends the loop and reaps the child (SIGKILL by PID if it does not end within 2 s).
  void stop();

  struct Shared;  // the mapping both processes see (open_spinner.cpp)

 private:
  Shared* shared_ = nullptr;
  pid_t pid_ = -1;
  std::string error_;
};

}  // namespace gdw::test
