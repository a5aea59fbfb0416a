// A real systemd 252 (Debian bookworm) as the service manager of a systemd-nspawn
// container, for tests of what systemd does to device cgroups (DeviceAllow=, daemon-reload,
// SetUnitProperties) on a machine whose PID 1 is not systemd.
//
// The container's cgroup root is a unique parent cgroup (gdw-test-<pid>-nspawn-<n>) made
// in every hierarchy below this process's own cgroup there: nspawn uses its launcher's
// cgroup as the container's root. Everything below it, and the container, is removed when
// the object goes away. The root file system is shared, read-only, by all containers
// (nspawn --volatile=overlay keeps every change in a tmpfs).
#pragma once

#include <sys/types.h>

#include <chrono>
#include <memory>
#include <string>
#include <vector>

#include "support/process.h"

namespace gdw::test {

// The cached minbase bookworm tree (debootstrap --include=systemd,dbus,systemd-sysv).
// It lives OUTSIDE the repository, in /var/cache/gdw-test/bookworm-rootfs (or
// $GDW_TEST_ROOTFS_CACHE/bookworm-rootfs), is built once per machine (≈ 1 min and
// ≈ 250 MB from Debian's mirror) and reused while its completion marker exists; delete the
// directory to rebuild it. Concurrent test processes wait for one builder (flock).
struct BookwormRootfs {
  std::string path;              // empty when unavailable
  std::string unavailable;       // why not, with debootstrap's last output
  bool download_failed = false;  // the mirror could not be reached: skip, do not fail
  bool built_now = false;
  std::chrono::milliseconds build_time{0};
};
BookwormRootfs ensure_bookworm_rootfs();
// The same with `extra_packages` installed by debootstrap as well (the containers run with
// --private-network: software installed in a test cannot fetch its dependencies), cached
// per package set in <cache>/bookworm-rootfs-<hash of the list>.
BookwormRootfs ensure_bookworm_rootfs(const std::vector<std::string>& extra_packages);

enum class CgroupMode { kV1, kV2 };
std::string to_string(CgroupMode mode);  // "v1", "v2"

class NspawnSystemd {
 public:
  // Why nspawn cannot run here (not root, a tool missing, the hierarchy absent); empty when
  // it can.
  static std::string unavailable_reason(CgroupMode mode);

  // Boots systemd in the rootfs and waits (≤ boot_timeout) until its system bus socket
  // exists and `systemctl is-system-running --wait` says running or degraded. Check ok().
  // v1: cgroup controllers as on the host, devices remounted writable before systemd
  // starts (nspawn mounts them read-only, and systemd would silently not enforce
  // DeviceAllow=). v2: the unified hierarchy (/sys/fs/cgroup/unified here), nspawn's
  // seccomp filter off and CAP_BPF granted so that systemd can load its device programs.
  NspawnSystemd(const std::string& rootfs, CgroupMode mode, std::chrono::milliseconds boot_timeout = 60s);
  ~NspawnSystemd();
  NspawnSystemd(const NspawnSystemd&) = delete;
  NspawnSystemd& operator=(const NspawnSystemd&) = delete;

  bool ok() const { return error_.empty(); }
  const std::string& error() const { return error_; }  // includes nspawn's output
  CgroupMode mode() const { return mode_; }
  const std::string& machine() const { return machine_; }
  pid_t leader() const { return leader_; }  // the container's PID 1 (systemd), host PID
  std::chrono::milliseconds boot_time() const { return boot_time_; }
  // unix:path=/proc/<leader>/root/run/dbus/system_bus_socket
  std::string bus_address() const;
  // A path inside the container as the host reaches it: /proc/<leader>/root<path>.
  std::string root_path(const std::string& path_inside) const;
  // nsenter -t <leader> -a <argv...>
  CommandResult run_inside(const std::vector<std::string>& argv, std::chrono::milliseconds timeout = 30s) const;
  // nspawn's output so far (the container's console).
  std::string console() const { return launcher_ ? launcher_->output() : std::string(); }

  // `systemd-run --scope --unit=<unit> --slice=<slice> -p <property>... <argv...>` inside,
  // left running. Returns the host PID of the scope's process (0 on failure, with the
  // reason in *why) once systemd has it in the scope's cgroup.
  pid_t start_scope(const std::string& unit, const std::string& slice, const std::vector<std::string>& properties,
                    const std::vector<std::string>& argv, std::string* why);

  // The host directory of `pid`'s cgroup in the hierarchy that enforces device rules for
  // this mode (v1: /sys/fs/cgroup/devices/..., v2: /sys/fs/cgroup/unified/...), read from
  // /proc/<pid>/cgroup; empty when not found.
  std::string device_cgroup_of(pid_t pid) const;

 private:
  void boot(const std::string& rootfs, std::chrono::milliseconds boot_timeout);
  void stop_container();

  CgroupMode mode_;
  std::string machine_;
  std::vector<std::string> parent_cgroups_;  // one per hierarchy, created here
  bool created_nspawn_run_dir_ = false;
  std::unique_ptr<BackgroundProcess> launcher_;             // systemd-nspawn
  std::vector<std::unique_ptr<BackgroundProcess>> scopes_;  // nsenter … systemd-run --scope
  pid_t leader_ = -1;
  std::string leader_start_time_;  // kill the leader by PID only while it is still ours
  std::chrono::milliseconds boot_time_{0};
  std::string error_;
};

// Forks a process, moves it into the cgroup directory `cgroup_dir` (its cgroup.procs),
// opens `node` there and returns the errno (0 when the open succeeded, -1 when the
// process could not join). An allowed mknod'ed node without a driver gives ENXIO, a denied
// one EPERM.
int open_errno_in_cgroup(const std::string& cgroup_dir, const std::string& node);

}  // namespace gdw::test
