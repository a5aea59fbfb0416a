// What bench/storm observes on the GPU containers: their wanted rules, whether devices.list
// covers them, and inotify on devices.allow/deny with each batch stamped when read.
#pragma once

#include <poll.h>
#include <sys/inotify.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <map>
#include <optional>
#include <sstream>
#include <stdexcept>
#include <string>
#include <vector>

#include "support/sandbox_node.h"

namespace gdw::bench {

using Clock = std::chrono::steady_clock;
using gdw::test::SandboxContainer;

struct Rule {
  char type;
  std::string major, minor, access;
};

inline std::optional<Rule> parse_rule(const std::string& line) {
  std::istringstream in(line);
  Rule r;
  std::string numbers;
  if (!(in >> r.type >> numbers >> r.access)) return std::nullopt;
  auto colon = numbers.find(':');
  if (colon == std::string::npos) return std::nullopt;
  r.major = numbers.substr(0, colon);
  r.minor = numbers.substr(colon + 1);
  return r;
}

inline bool rule_covers(const Rule& have, const Rule& want) {
  return (have.type == 'a' || have.type == want.type) && (have.major == "*" || have.major == want.major) &&
         (have.minor == "*" || have.minor == want.minor) &&
         std::all_of(want.access.begin(), want.access.end(), [&](char c) { return have.access.find(c) != std::string::npos; });
}

struct Target {
  const SandboxContainer* container;
  std::vector<std::string> wanted;  // "c 195:3 rw"
  int list_fd = -1;
};

// The GPU and the control nodes every GPU holder gets (the daemon's default devices.control
// that exist on the sandbox node).
inline std::vector<std::string> wanted_rules(std::uint32_t gpu_minor, const test::FixtureMajors& majors = {}) {
  const std::string nvidia = "c " + std::to_string(majors.nvidia) + ":", uvm = "c " + std::to_string(majors.uvm) + ":";
  return {nvidia + std::to_string(gpu_minor) + " rw", nvidia + "255 rw", uvm + "0 rw", uvm + "1 rw"};
}

inline bool covered(const Target& t) {
  char buf[8192];
  ssize_t n = ::pread(t.list_fd, buf, sizeof buf - 1, 0);
  if (n < 0) return false;
  std::vector<Rule> have;
  std::istringstream lines(std::string(buf, static_cast<std::size_t>(n)));
  for (std::string line; std::getline(lines, line);)
    if (auto r = parse_rule(line)) have.push_back(*r);
  return std::all_of(t.wanted.begin(), t.wanted.end(), [&](const std::string& w) {
    auto want = *parse_rule(w);
    return std::any_of(have.begin(), have.end(), [&](const Rule& h) { return rule_covers(h, want); });
  });
}

// inotify on every GPU container's devices.allow and devices.deny; batches are stamped when read.
class Watch {
 public:
  struct Batch {
    Clock::time_point at;
    std::vector<int> targets;  // indices, one per event (repeats possible)
    bool overflow = false;
    bool has(int i) const { return std::find(targets.begin(), targets.end(), i) != targets.end(); }
  };
  explicit Watch(const std::vector<Target>& targets) : fd_(::inotify_init1(IN_CLOEXEC | IN_NONBLOCK)) {
    if (fd_ < 0) throw std::runtime_error("inotify_init1 failed");
    for (std::size_t i = 0; i < targets.size(); ++i)
      for (const char* f : {"/devices.allow", "/devices.deny"}) {
        int wd = ::inotify_add_watch(fd_, (targets[i].container->cgroup_dir + f).c_str(), IN_MODIFY);
        if (wd < 0) throw std::runtime_error("inotify_add_watch failed");
        by_wd_[wd] = static_cast<int>(i);
      }
  }
  ~Watch() { ::close(fd_); }
  void drain() { read(std::chrono::microseconds(0)); }
  // Waits up to `timeout` for a first event, then reads all that is queued.
  Batch read(std::chrono::microseconds timeout) {
    Batch b;
    pollfd p{fd_, POLLIN, 0};
    int ms = static_cast<int>((timeout.count() + 999) / 1000);
    if (::poll(&p, 1, ms) <= 0) {
      b.at = Clock::now();
      return b;
    }
    for (;;) {
      ssize_t n = ::read(fd_, buf_, sizeof buf_);
      if (n <= 0) break;
      for (char* q = buf_; q < buf_ + n;) {
        auto* ev = reinterpret_cast<inotify_event*>(q);
        if (ev->mask & IN_Q_OVERFLOW) b.overflow = true;
        if (auto it = by_wd_.find(ev->wd); it != by_wd_.end()) b.targets.push_back(it->second);
        q += sizeof(inotify_event) + ev->len;
      }
    }
    b.at = Clock::now();
    return b;
  }

 private:
  int fd_;
  std::map<int, int> by_wd_;
  alignas(inotify_event) char buf_[1 << 18];
};

}  // namespace gdw::bench
