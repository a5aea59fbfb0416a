// The floor bench/storm measures gpu-devwatch's cost against: the least any inotify fixer
// must do, in C++ with nothing else. It watches only devices.deny (an allow write cannot
// revoke), keeps devices.list and devices.allow open, and after each wake-up reads the
// list of each container that had an event and writes the rules it lacks. No attribution,
// metrics, logs, identity or allocation record: what is left is the kernel's part (inotify,
// the list's formatting, one write per rule) and the loop.
//
//   floor_fixer TARGETS.json   (the same file bench/python_fixer.py takes)
#include <fcntl.h>
#include <poll.h>
#include <sys/inotify.h>
#include <unistd.h>

#include <cstdio>
#include <fstream>
#include <map>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/device_rule.h"

namespace {

struct Container {
  int list_fd = -1, allow_fd = -1;
  std::vector<gdw::DeviceRule> wanted;
  std::vector<std::string> wanted_text;
  bool dirty = false;
};

void repair(Container& c) {
  char buf[16384];
  std::string text;
  for (off_t off = 0;;) {
    ssize_t n = ::pread(c.list_fd, buf, sizeof buf, off);
    if (n <= 0) break;
    text.append(buf, static_cast<std::size_t>(n));
    off += n;
  }
  auto list = gdw::parse_devices_list(text);
  if (!list) return;
  for (std::size_t i = 0; i < c.wanted.size(); ++i) {
    const gdw::DeviceRule& w = c.wanted[i];
    if (!gdw::device_list_allows(*list, gdw::DeviceNumber{w.type, w.major, w.minor}, w.access))
      (void)!::write(c.allow_fd, c.wanted_text[i].data(), c.wanted_text[i].size());
  }
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: floor_fixer TARGETS.json\n");
    return 2;
  }
  nlohmann::json targets = nlohmann::json::parse(std::ifstream(argv[1]));
  int in = ::inotify_init1(IN_NONBLOCK | IN_CLOEXEC);
  std::vector<Container> containers;
  containers.reserve(targets.size());
  std::map<int, std::size_t> by_wd;
  for (const auto& [dir, rules] : targets.items()) {
    Container c;
    c.list_fd = ::open((dir + "/devices.list").c_str(), O_RDONLY | O_CLOEXEC);
    c.allow_fd = ::open((dir + "/devices.allow").c_str(), O_WRONLY | O_CLOEXEC);
    for (const auto& r : rules) {
      auto rule = gdw::parse_device_rule(r.get<std::string>());
      if (!rule) return 1;
      c.wanted.push_back(*rule);
      c.wanted_text.push_back(r.get<std::string>());
    }
    int wd = ::inotify_add_watch(in, (dir + "/devices.deny").c_str(), IN_MODIFY);
    if (in < 0 || c.list_fd < 0 || c.allow_fd < 0 || wd < 0) {
      std::perror(dir.c_str());
      return 1;
    }
    by_wd[wd] = containers.size();
    containers.push_back(std::move(c));
  }
  for (auto& c : containers) repair(c);
  std::printf("floor_fixer: watching %zu containers, ready\n", containers.size());
  std::fflush(stdout);
  alignas(inotify_event) char buf[1 << 16];
  std::vector<std::size_t> dirty;
  for (;;) {
    pollfd p{in, POLLIN, 0};
    ::poll(&p, 1, -1);
    for (ssize_t n; (n = ::read(in, buf, sizeof buf)) > 0;) {
      for (ssize_t off = 0; off < n;) {
        const auto* ev = reinterpret_cast<const inotify_event*>(buf + off);
        off += static_cast<ssize_t>(sizeof(inotify_event) + ev->len);
        if (ev->mask & IN_Q_OVERFLOW) {
          for (std::size_t i = 0; i < containers.size(); ++i) dirty.push_back(i);
          continue;
        }
        auto it = by_wd.find(ev->wd);
        if (it != by_wd.end()) dirty.push_back(it->second);
      }
    }
    for (std::size_t i : dirty) containers[i].dirty = true;
    for (std::size_t i : dirty) {
      if (!containers[i].dirty) continue;
      containers[i].dirty = false;
      repair(containers[i]);
    }
    dirty.clear();
  }
}
