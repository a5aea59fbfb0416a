// A real container started by Debian's runc or crun from a busybox-static rootfs, for tests
// that need a real runtime's device-cgroup behaviour. Killed and deleted on destruction.
//
// What differs between the two runtimes on this test machine, handled here:
// - crun refuses a hybrid host whose cgroup2 mount has a controller enabled (hugetlb here):
//   cgroup_v1_only_wrapper() hides the cgroup2 mount from it in a private mount namespace.
// - crun sets RLIMIT_MEMLOCK to infinity before loading its device program; root here lacks
//   CAP_SYS_RESOURCE, so crun runs with test/support/memlock_shim.c preloaded.
#pragma once

#include <map>
#include <string>
#include <vector>

#include "support/process.h"
#include "support/temp_dir.h"

namespace gdw::test {

enum class OciRuntime { kRunc, kCrun };
std::string to_string(OciRuntime runtime);  // "runc", "crun"

struct OciDeviceNode {
  std::string path;  // inside the container, outside /dev (the runtimes mount a tmpfs there)
  unsigned major = 0;
  unsigned minor = 0;
};
using RuncDeviceNode = OciDeviceNode;

// Prefixes for every runtime invocation on the host.
// cgroup v2: /sys/fs/cgroup/unified bound onto /sys/fs/cgroup in a private mount namespace.
std::vector<std::string> cgroup_v2_wrapper();
// cgroup v1 only: the cgroup2 mount hidden in a private mount namespace (for crun).
std::vector<std::string> cgroup_v1_only_wrapper();

class OciContainer {
 public:
  struct Options {
    std::string id;            // 64 hex characters
    std::string bundle_dir;    // created; config.json written here (a path on the host)
    std::string cgroups_path;  // linux.cgroupsPath ("slice:prefix:name" with systemd_cgroup)
    std::map<std::string, std::string> annotations;
    // linux.resources.devices after the runtime's default deny-all, e.g. {"c", 195, 0, "rw"}.
    struct Rule {
      std::string type;
      long major;
      long minor;
      std::string access;
    };
    std::vector<Rule> allow;
    std::vector<OciDeviceNode> nodes;
    // Prepended to every runtime invocation (a private mount namespace, nsenter into a
    // systemd-nspawn container).
    std::vector<std::string> wrapper;
    OciRuntime runtime = OciRuntime::kRunc;
    bool systemd_cgroup = false;  // --systemd-cgroup: the runtime asks systemd for a scope
    // Where the runtime itself sees the bundle and keeps its state, when it runs in another
    // mount namespace than this process (empty: bundle_dir, and a temporary directory).
    std::string runtime_bundle_dir{};
    std::string runtime_state_dir{};
    // crun only: the memlock shim's path as the runtime sees it (empty: the one built here).
    std::string memlock_shim{};
  };

  static bool available(OciRuntime runtime = OciRuntime::kRunc);
  explicit OciContainer(Options options);
  ~OciContainer();
  OciContainer(const OciContainer&) = delete;
  OciContainer& operator=(const OciContainer&) = delete;

  bool running() const { return started_; }
  const std::string& start_error() const { return start_error_; }
  // `<runtime> exec` (which does not touch device rules): the errno of opening `path` inside
  // (0 opened, ENXIO allowed without a driver, EPERM denied, -1 anything else).
  int open_errno(const std::string& path);
  // The runtime's command line with its global options (--root, --systemd-cgroup).
  CommandResult cli(const std::vector<std::string>& args);
  CommandResult runc(const std::vector<std::string>& args) { return cli(args); }

 private:
  void start();

  Options options_;
  TempDir state_{"gdw-oci-root"};
  bool started_ = false;
  std::string start_error_;
};
using RuncContainer = OciContainer;

}  // namespace gdw::test
