// A real container started by Debian's runc from a busybox-static rootfs, for tests that
// need a real runtime's device-cgroup behaviour. Killed and deleted on destruction.
#pragma once

#include <map>
#include <string>
#include <vector>

#include "support/process.h"

namespace gdw::test {

struct RuncDeviceNode {
  std::string path;  // inside the container, outside /dev (runc mounts a tmpfs there)
  unsigned major = 0;
  unsigned minor = 0;
};

class RuncContainer {
 public:
  struct Options {
    std::string id;            // 64 hex characters
    std::string bundle_dir;    // created; config.json written here
    std::string cgroups_path;  // linux.cgroupsPath
    std::map<std::string, std::string> annotations;
    // linux.resources.devices after runc's default deny-all, e.g. {"c", 195, 0, "rw"}.
    struct Rule {
      std::string type;
      long major;
      long minor;
      std::string access;
    };
    std::vector<Rule> allow;
    std::vector<RuncDeviceNode> nodes;
    // Prepended to every runc invocation (e.g. a private mount namespace for cgroup v2).
    std::vector<std::string> wrapper;
  };

  static bool available();
  explicit RuncContainer(Options options);
  ~RuncContainer();
  RuncContainer(const RuncContainer&) = delete;
  RuncContainer& operator=(const RuncContainer&) = delete;

  bool running() const { return started_; }
  const std::string& start_error() const { return start_error_; }
  // `runc exec` (which does not touch device rules): the errno of opening `path` inside.
  int open_errno(const std::string& path);
  CommandResult runc(const std::vector<std::string>& args);

 private:
  Options options_;
  TempDir root_{"gdw-runc-root"};
  bool started_ = false;
  std::string start_error_;
};

}  // namespace gdw::test
