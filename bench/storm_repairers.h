// The repairers bench/storm runs side by side: gpu-devwatch, our Python inotify fixer (the
// baseline) and the C++ floor, each a child process killed by PID when its session ends.
#pragma once

#include <signal.h>
#include <time.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <map>
#include <memory>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

#include "bench_node.h"
#include "support/metrics_text.h"
#include "support/process.h"

namespace gdw::bench {

using namespace std::chrono_literals;
using test::BackgroundProcess;
using test::eventually;
using test::free_port;
using test::http_get;
using test::metric_value;
using test::SandboxNode;

inline double cpu_ms(pid_t pid) { return 1000.0 * cpu_seconds(pid); }  // utime + stime of the whole process

// The same total with nanosecond resolution: the process's CPU-time clock.
inline double cpu_clock_ms(pid_t pid) {
  clockid_t id;
  timespec ts{};
  if (::clock_getcpuclockid(pid, &id) != 0 || ::clock_gettime(id, &ts) != 0) return -1;
  return static_cast<double>(ts.tv_sec) * 1e3 + static_cast<double>(ts.tv_nsec) / 1e6;
}

// The CPU time of one thread (the repairer's main thread, its event loop) in ms, from
// /proc/<pid>/task/<tid>/schedstat (ns on CPU): a thread's CPU-time clock cannot be read
// from another process.
inline double thread_cpu_ms(pid_t pid, pid_t tid) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/task/" + std::to_string(tid) + "/schedstat");
  double ns = -1;
  return in >> ns ? ns / 1e6 : -1;
}

class Repairer {
 public:
  virtual ~Repairer() = default;
  virtual const char* name() const = 0;
  virtual bool start() = 0;
  virtual void stop() { process_.reset(); }  // SIGKILL by PID
  pid_t pid() const { return process_->pid(); }
  std::string output() const { return process_ ? process_->output() : ""; }
  // How many repairs the fight-loop guard held back so far; -1: this repairer has none.
  virtual double throttled() const { return -1; }

 protected:
  std::unique_ptr<BackgroundProcess> process_;
};

// Pids of the gpu-devwatch processes running on this machine, by /proc/<pid>/comm.
inline std::vector<pid_t> running_daemons() {
  std::vector<pid_t> pids;
  std::error_code ec;
  for (const auto& entry : std::filesystem::directory_iterator("/proc", ec)) {
    const std::string name = entry.path().filename();
    if (name.find_first_not_of("0123456789") != std::string::npos) continue;
    std::ifstream comm(entry.path() / "comm");
    std::string line;
    if (std::getline(comm, line) && line == "gpu-devwatch") pids.push_back(std::stoi(name));
  }
  return pids;
}

class Daemon : public Repairer {
 public:
  Daemon(SandboxNode& node, std::string binary, std::string extra)
      : node_(node), binary_(std::move(binary)), extra_(std::move(extra)) {}
  const char* name() const override { return "gpu-devwatch"; }
  bool start() override {
    // Another daemon's probe and repairs would skew every figure: one left running by an
    // earlier bench whose --daemon-binary wrapper did not exec it (killed by its pid, the
    // wrapper died and the daemon did not), or a node's own.
    if (const auto others = running_daemons(); !others.empty())
      throw std::runtime_error("another gpu-devwatch is running (pid " + std::to_string(others.front()) +
                               "): its probe and repairs would skew the figures; stop it first");
    port_ = free_port();
    const std::string config = node_.write_config("metrics:\n  listen: 127.0.0.1:" + std::to_string(port_) + "\n" + extra_);
    process_ = std::make_unique<BackgroundProcess>(std::vector<std::string>{binary_, "run", "--config", config});
    return process_->wait_for_output(" ready", 30s) && eventually([&] { return !http_get(port_).empty(); }, 10s);
  }
  void stop() override {
    if (process_ && process_->running()) {
      process_->signal(SIGTERM);
      process_->wait(10s);
    }
    process_.reset();
  }
  double throttled() const override {
    return metric_value(http_get(port_), "gpu_devwatch_repairs_throttled_total").value_or(0);
  }
  // A series without labels from the daemon's /metrics; 0 when it has none (yet).
  double metric(const std::string& name) const { return metric_value(http_get(port_), name).value_or(0); }
  // A labelled series; nullopt when the daemon has none (a build without that metric).
  std::optional<double> series(const std::string& name, const std::map<std::string, std::string>& labels) const {
    return metric_value(http_get(port_), name, labels);
  }

 private:
  SandboxNode& node_;
  std::string binary_, extra_;
  int port_ = 0;
};

class PythonFixer : public Repairer {
 public:
  PythonFixer(std::string script, std::string targets) : script_(std::move(script)), targets_(std::move(targets)) {}
  const char* name() const override { return "python fixer"; }
  bool start() override {
    process_ = std::make_unique<BackgroundProcess>(std::vector<std::string>{"python3", script_, targets_});
    return process_->wait_for_output(" ready", 30s);
  }

 private:
  std::string script_, targets_;
};

// The least an inotify fixer must do (bench/floor_fixer.cpp): what is left of a repair's
// cost when nothing but the kernel's part remains.
class FloorFixer : public Repairer {
 public:
  FloorFixer(std::string binary, std::string targets) : binary_(std::move(binary)), targets_(std::move(targets)) {}
  const char* name() const override { return "C++ floor"; }
  bool start() override {
    process_ = std::make_unique<BackgroundProcess>(std::vector<std::string>{binary_, targets_});
    return process_->wait_for_output(" ready", 30s);
  }

 private:
  std::string binary_, targets_;
};

}  // namespace gdw::bench
