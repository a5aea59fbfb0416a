// A GPU node whose containers are scopes of a real systemd (NspawnSystemd, v1 or v2), as
// kubelet and containerd make them with the systemd cgroup driver: the node's GPU files
// (/proc/devices, the GPU's information file, mknod'ed device nodes), a container scope
// `kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod<uid_>.slice/
// cri-containerd-<id>.scope`, its OCI bundle, kubelet's checkpoint allocating the GPU to it,
// and the daemon's configuration for all of that (systemd's bus and unit directories are
// the machine's, reached through /proc/<leader>/root).
#pragma once

#include <sys/types.h>

#include <string>
#include <utility>
#include <vector>

#include "runtime/oci_config.h"
#include "support/nspawn_systemd.h"
#include "support/temp_dir.h"

namespace gdw::test {

// The node's one allocatable GPU (nvidia0, c 195:0). nvidia1 (c 195:1) belongs to nobody.
inline constexpr const char* kSystemdNodeGpu = "GPU-2f815c32-768d-d782-1073-db01d7b90215";

struct ScopeContainer {
  std::string pod_uid;
  std::string id;      // 64 hex characters
  std::string unit;    // cri-containerd-<id>.scope
  std::string slice;   // kubepods-burstable-pod<uid with _>.slice
  std::string cgroup;  // host path in the hierarchy enforcing device rules for the mode
  pid_t pid = 0;       // the scope's process (host PID)
};

// What a test needs before it boots a real systemd in `mode`: nspawn and the mode here,
// device programs that load (v2), and Debian's root file system. `skip`: why it cannot run
// here; `failure`: why it should and cannot (the mirror answered, the build failed); else
// `rootfs` is the root to boot.
struct SystemdBootPrerequisites {
  std::string skip;
  std::string failure;
  std::string rootfs;
};
SystemdBootPrerequisites systemd_boot_prerequisites(CgroupMode mode);

// runc's default device rules as its systemd driver turns them into DeviceAllow= entries
// (path, access), in its order.
std::vector<std::pair<std::string, std::string>> runc_default_device_allow();

class SystemdGpuNode {
 public:
  explicit SystemdGpuNode(NspawnSystemd& systemd);
  // Why the node files could not be made; empty when they were.
  const std::string& error() const { return error_; }

  // Starts `systemd-run --scope` for a new container of a new burstable pod with the
  // scope's `properties` ("DevicePolicy=strict", "DeviceAllow=/dev/char/1:3 rwm"), writes
  // its bundle (linux.resources.devices = `spec_rules`) and the checkpoint giving it the
  // GPU (container name "cuda"). pid 0 on failure, with the reason in *why.
  // `create_ended` false: the runtime's create goes on (its pid file, init.pid, not yet
  // written: end_create() writes it).
  ScopeContainer start_container(const std::vector<std::string>& properties,
                                 const std::vector<OciDeviceCgroupRule>& spec_rules, std::string* why,
                                 bool create_ended = true);
  // The pid file the runtime writes last, holding the container's first process.
  void end_create(const ScopeContainer& c);

  // The daemon's configuration for this node (after start_container): metrics on 127.0.0.1:<port>, then `extra`
  // (top-level YAML keys not set here: mode, probe, daemon, repair, log).
  std::string config(int port, const std::string& extra = "") const;
  // /proc/<leader>/root/run/systemd/{system.control,transient}: where systemd keeps
  // runtime units and drop-ins (systemd.unit_dirs).
  std::vector<std::string> unit_dirs() const;
  std::string node_path(const std::string& name) const { return files_ / ("dev/" + name); }
  // errno of an open() of the node by a process in the container's cgroup (ENXIO allowed,
  // EPERM denied, -1 the process could not join).
  int open_errno(const ScopeContainer& c, const std::string& name) const;

 private:
  NspawnSystemd& systemd_;
  TempDir files_{"gdw-systemd-node"};
  std::string kubepods_;  // cgroup.kubepods, known once a container started
  std::string error_;
};

}  // namespace gdw::test
