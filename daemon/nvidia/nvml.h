// MIG UUID → (GPU minor, GPU instance, compute instance) from NVML.
//
// NVML can hang (seed incident: nvmlInit blocked forever on driver 570 + MIG), so it is
// never called in the daemon's process: `gpu-devwatch nvml-query` runs in a child process
// that dlopen()s the library and prints JSON on stdout; the parent reads it with a deadline
// and kills the child when the deadline passes.
#pragma once

#include <sys/types.h>

#include <chrono>
#include <string>
#include <string_view>
#include <vector>

#include "core/model.h"
#include "core/result.h"

namespace gdw {

struct NvmlAnswer {
  std::string driver_version;
  std::vector<GpuDevice> gpus;  // uuid + minor
  std::vector<MigDevice> migs;
};

// The child's stdout format.
std::string format_nvml_answer(const NvmlAnswer& answer);
Result<NvmlAnswer> parse_nvml_answer(std::string_view json_text);

// Body of the hidden `nvml-query` subcommand: dlopen(library), query, print JSON on stdout.
// Exit 0 on success, 3 when the library cannot be loaded, 4 when NVML returns an error,
// 1 when the answer cannot be written; the reason goes to stderr.
int nvml_query_main(const std::string& library);

// Adds an answer to an inventory read from procfs: NVML's MIG mappings replace configured
// ones with the same UUID (mig_source becomes "nvml" when it knew any MIG), and GPUs
// missing from procfs are added.
void merge_nvml_answer(Inventory& inventory, const NvmlAnswer& answer);

// A running query child. Non-blocking: the daemon polls fd() in its event loop.
class NvmlQuery {
 public:
  // Starts `<exe> nvml-query --library <library>`.
  static Result<NvmlQuery> start(const std::string& exe, const std::string& library);
  NvmlQuery(NvmlQuery&&) noexcept;
  NvmlQuery& operator=(NvmlQuery&&) noexcept;
  NvmlQuery(const NvmlQuery&) = delete;
  NvmlQuery& operator=(const NvmlQuery&) = delete;
  ~NvmlQuery();  // kills and reaps the child if still running

  int fd() const { return fd_; }  // readable when output arrives or the child exits
  pid_t pid() const { return pid_; }
  // Reads what is available. Returns true once the child closed its stdout (done).
  bool read_available();
  // After done: reaps the child and parses its answer.
  Result<NvmlAnswer> finish();
  // Deadline passed: SIGKILL, reap without blocking the caller for long.
  void kill();

 private:
  NvmlQuery(pid_t pid, int fd, int err_fd) : pid_(pid), fd_(fd), err_fd_(err_fd) {}
  // Waits up to `grace` for the child to exit, without blocking longer.
  bool reap(std::chrono::milliseconds grace);
  std::string describe_exit() const;
  void close_fds();

  pid_t pid_ = -1;
  int fd_ = -1;
  int err_fd_ = -1;  // the child's stderr: a memfd that cannot grow past a few KiB
  std::string output_;
  bool too_large_ = false;
  bool exited_ = false;     // reaped by us (wait_status_ valid) or by someone else
  bool abandoned_ = false;  // did not die after SIGKILL; left to the zombie sweep
  int wait_status_ = -1;    // -1: unknown
};

// For one-shot commands: start, poll with the deadline, kill on timeout.
Result<NvmlAnswer> run_nvml_query(const std::string& exe, const std::string& library,
                                  std::chrono::milliseconds deadline);

}  // namespace gdw
