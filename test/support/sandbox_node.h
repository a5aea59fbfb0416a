// A sandbox GPU node on the real kernel: real test cgroups laid out like kubelet's
// (under a unique parent), a sleeping process in every container cgroup, GPU device nodes
// made with mknod (no driver behind them: an allowed open gives ENXIO, a denied one EPERM),
// a fixture /proc/driver/nvidia tree, OCI bundles with CRI annotations and a valid kubelet
// checkpoint. Used by the privileged tests, the benchmarks and the demo.
#pragma once

#include <sys/types.h>

#include <list>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "core/model.h"
#include "runtime/cgroup_names.h"
#include "runtime/oci_config.h"
#include "support/cgroup_sandbox.h"
#include "support/temp_dir.h"

namespace gdw::test {

// Majors of the fixture devices. 195 is NVIDIA's; the dynamic ones are unused here.
inline constexpr std::uint32_t kNvidiaMajor = 195;
inline constexpr std::uint32_t kUvmMajor = 237;
inline constexpr std::uint32_t kCapsMajor = 238;

// The majors a sandbox node gives its nvidia, nvidia-uvm and nvidia-caps nodes.
struct FixtureMajors {
  std::uint32_t nvidia = kNvidiaMajor, uvm = kUvmMajor, caps = kCapsMajor;
};
// The usual majors, or, on a host where a real driver holds one of them (a GPU machine), majors
// from the ranges reserved for local use (60-63, 120-127, 240-254) that no driver holds, so
// that an allowed open of a fixture node still reaches no driver (ENXIO) instead of waking a
// real GPU. `proc_devices` is the host's /proc/devices text.
FixtureMajors fixture_majors_for_host(const std::string& proc_devices);

// Where the cgroup2 hierarchy is: /sys/fs/cgroup/unified on a hybrid host (these VMs), else
// /sys/fs/cgroup on a pure v2 host. {cgroup_root, hierarchy} as CgroupSandbox takes them.
std::pair<std::string, std::string> cgroup2_location();

struct SandboxContainerSpec {
  std::string pod_namespace = "default";
  std::string pod_name;
  std::string container_name;
  QosClass qos = QosClass::kBurstable;
  std::string resource = "nvidia.com/gpu";
  std::vector<std::string> device_ids;  // the allocation; empty: a container without GPUs
  std::vector<DeviceSpec> device_specs;
  std::vector<std::string> cdi_devices;  // AllocResp cdi_devices (deviceListStrategy cdi-cri)
  bool with_bundle = true;
  // As the NVIDIA hook does out of band: allow the GPU and control nodes at creation.
  // false reproduces seed 001 (nvidia-uvm never granted) for everything but the GPU.
  bool hook_grants_gpu = true;
  bool hook_grants_uvm = true;
  std::string pod_uid;  // generated when empty; set to put a second container in a pod
  bool in_checkpoint = true;  // false: kubelet's checkpoint does not record it
  // kCrio: a crio-<id> leaf and <crio_state_dir>/<id>/userdata/config.json with CRI-O's keys.
  RuntimeKind runtime = RuntimeKind::kContainerd;
  // The pod's own annotations: the runtime copies them into config.json, then writes its keys.
  std::map<std::string, std::string> pod_annotations;
  // process.env of the bundle. Empty: NVIDIA_VISIBLE_DEVICES=<device_ids> as the device
  // plugin's AllocResp sets it, nothing for a container without devices. A CUDA image
  // without a GPU limit: {"NVIDIA_VISIBLE_DEVICES=all"}.
  std::vector<std::string> env;
  // A container without an allocation: the GPUs (indices) the NVIDIA hook granted at
  // creation because its env named them, with the control nodes.
  std::vector<int> env_hook_gpus;
  // More linux.resources.devices allow rules in the bundle ("c 195:0 rw"): a spec that
  // lists the devices itself (passDeviceSpecs, CDI).
  std::vector<std::string> spec_extra_allow;
};

struct SandboxContainer {
  SandboxContainerSpec spec;
  std::string id;          // 64 hex characters
  std::string cgroup_rel;  // relative to the sandbox parent
  std::string cgroup_dir;  // absolute
  pid_t sleeper = -1;
  std::string process_rel;  // where its processes are, when not cgroup_rel (crun's sub-cgroup)
  // add_container_in_create(): its runtime, until finish_runtime().
  pid_t runtime = -1;
};

// The text of a kubelet checkpoint that allocates one `nvidia.com/gpu` (`gpu_uuid`, the
// only one registered) to `container` of pod `pod_uid`: for nodes built by hand (the
// systemd and package tests) rather than by SandboxNode.
std::string one_gpu_checkpoint(const std::string& pod_uid, const std::string& container, const std::string& gpu_uuid);

// How the runtime of SandboxNode::add_container_in_create() behaves.
struct RuntimeShape {
  // The runtime first touches this much memory of its own, which the kernel tears down at
  // its exit after the probe sees the exit start and before its pidfd says so (a Go
  // runtime's teardown, made long enough to tell the two apart).
  std::size_t touched_mb = 0;
  // The pid file is written (renamed into place, as runc does) only when the runtime is
  // let go (release_lingering()), right before it exits: the create ends then.
  bool pid_file_at_exit = false;
};

class SandboxNode {
 public:
  struct Options {
    int gpus = 2;
    bool systemd_naming = false;  // kubepods.slice/... and cri-containerd-<id>.scope
    bool create_uvm_nodes = true;
    std::string tag;
    // cgroup v2 (the cgroup2 mount at /sys/fs/cgroup/unified): containers get a runtime's
    // device program instead of v1 rules; re-applying attaches systemd's ANDed program.
    bool v2 = false;
    FixtureMajors majors;
  };
  SandboxNode();
  explicit SandboxNode(const Options& options);
  ~SandboxNode();

  static bool available(bool v2 = false) {
    return v2 ? CgroupSandbox::available(cgroup2_location().second, cgroup2_location().first)
              : CgroupSandbox::available("devices");
  }
  const FixtureMajors& majors() const { return options_.majors; }
  // Why a v2 sandbox node cannot run here ("" when it can): root, a writable cgroup2
  // hierarchy and device programs that load.
  static std::string v2_unavailable_reason();

  const SandboxContainer& add_container(SandboxContainerSpec spec);
  // Who makes the cgroup of a container in create, and where the runtime applies.
  enum class CreateShape {
    kRuntimeMakesCgroup,  // cgroupfs driver: the runtime makes the cgroup and applies there
    kSystemdScope,        // systemd driver: the scope is made first (as systemd does), runc applies there
    kCrunSubgroup,        // systemd driver, crun: the scope first, then crun's `container` sub-cgroup
  };
  // A container whose runtime's create has not ended: a child process calling itself
  // `comm` (runc, crun) makes its cgroup as `shape` says, applies the spec's device rules
  // (v1: deny all, then the spec; v2: a program allowing the spec), starts the container's
  // first process there (its child, as runc's init is) and writes that pid in the pid file;
  // then it lives on, its apply not ended, until finish_runtime(). The GPU is not in the
  // spec: only the daemon grants it.
  const SandboxContainer& add_container_in_create(SandboxContainerSpec spec, const char* comm, CreateShape shape,
                                                  RuntimeShape runtime = {});
  // A runtime's re-apply of `c` (runc update, a second start: reapply_spec()) from a child
  // process calling itself `comm`, which then lives on, its apply not ended, until
  // finish_lingering(pid). Its pid.
  pid_t start_lingering_reapply(const SandboxContainer& c, const char* comm);
  // The same with `reapply` (0 or an errno) in place of reapply_spec(c): a runtime applying
  // other rules.
  pid_t start_lingering_as(const char* comm, const std::function<int()>& reapply);
  // A runtime's `verb` ("update", "create") of `c` as containerd's shim runs it: a child
  // re-applies the spec (reapply_spec()), then becomes a program called `comm` whose
  // command line is `comm --root /run/containerd/runc/k8s.io update --resources - <c.id>`
  // (create: `... create --bundle <dir> --pid-file <dir>/init.pid <c.id>`), and lives on,
  // its apply not ended, until finish_lingering(pid). `inside`: it runs in that container's
  // cgroup (a tenant's process dressed as a runtime), else in the test's. Its pid.
  pid_t start_lingering_runtime(const SandboxContainer& c, const char* comm, const std::string& verb,
                                const SandboxContainer* inside = nullptr);
  // A process of start_lingering_*() or add_container_in_create() exits (waited for).
  void finish_lingering(pid_t pid);
  // Tells a process of start_lingering*() to exit and returns at once; finish_lingering()
  // waits for it.
  void release_lingering(pid_t pid);
  // The runtime of add_container_in_create() exits (and is waited for); no-op otherwise.
  void finish_runtime(const SandboxContainer& c);
  // Kills the container's process and removes its cgroup and bundle (checkpoint untouched).
  void remove_container(const SandboxContainer& c);
  // (Re)writes the checkpoint atomically (temp file + rename), as kubelet does.
  void write_checkpoint();
  // An allocation for a container created outside this class (runc, containerd in tests);
  // part of the next write_checkpoint().
  void allocate(const std::string& pod_uid, const std::string& container_name, const std::vector<std::string>& ids,
                const std::string& resource = "nvidia.com/gpu");

  std::string gpu_uuid(int index) const;
  std::string node_path(const std::string& name) const { return dev_.path() + "/" + name; }  // "nvidia0"
  const std::string& dev_root() const { return dev_.path(); }
  std::string proc_root() const { return files_.path() + "/proc"; }
  std::string checkpoint_path() const { return files_.path() + "/kubelet/device-plugins/kubelet_internal_checkpoint"; }
  std::string device_plugins_dir() const { return files_.path() + "/kubelet/device-plugins"; }
  std::string pod_resources_socket() const { return files_.path() + "/kubelet/pod-resources/kubelet.sock"; }
  std::string state_dir() const { return files_.path() + "/run/containerd/io.containerd.runtime.v2.task/k8s.io"; }
  std::string crio_state_dir() const { return files_.path() + "/crio/overlay-containers"; }
  // cdi.spec_dirs of write_config(), in order: /etc/cdi's and /var/run/cdi's stand-ins.
  std::string cdi_etc_dir() const { return files_.path() + "/etc/cdi"; }
  std::string cdi_run_dir() const { return files_.path() + "/run/cdi"; }
  std::string kubepods_rel() const;  // relative to the devices hierarchy root
  CgroupSandbox& cgroups() { return cgroups_; }
  const std::list<SandboxContainer>& containers() const { return containers_; }

  // A config file for the daemon/check pointing at this sandbox; `extra` is appended YAML
  // (top-level keys not otherwise set here: mode, metrics, daemon, repair, probe, log);
  // `kubelet_extra` continues the kubelet: section ("  source: auto\n").
  std::string write_config(const std::string& extra = "", const std::string& kubelet_extra = "") const;

  // The revocation patterns, written to the real cgroup files the way the revokers do.
  // v1 — old runc / containerd-shim and systemd v1: deny `a`, then the spec's allows.
  // v2 — systemd after a daemon-reload: a new program allowing only the spec, ANDed with
  // what is attached (seed 004).
  void reapply_spec(const SandboxContainer& c) { reapply_spec(c.cgroup_rel); }
  void reapply_spec(const std::string& cgroup_rel);
  // The devices the spec allows (runc's defaults), as rules.
  static std::vector<std::string> spec_allow_rules();
  // Old runc's re-apply (deny `a`, then spec_allow_rules()) from a child process that calls
  // itself `comm`, as a runtime binary of that name would; false if a write failed.
  static bool reapply_as_old_runc(const SandboxContainer& c, const char* comm);
  // The container's OCI device rules: deny all, then spec_allow_rules().
  static std::vector<OciDeviceCgroupRule> spec_rules();

  // errno of an open() of /dev-root/<name> by a process inside the container's cgroup:
  // ENXIO = allowed (no driver), EPERM = denied.
  int open_errno(const SandboxContainer& c, const std::string& node_name);

 private:
  std::string bundle_json(const SandboxContainer& c) const;
  // Its id and cgroup names, and its bundle written (with_bundle): no cgroup yet.
  SandboxContainer new_container(SandboxContainerSpec spec);
  // In the runtime's child process: `rel` made when `make`, the spec applied there, the
  // first process started in it and `pid_file` written (none: ""). Its pid, or -1.
  pid_t apply_as_runtime(const std::string& rel, bool make, const std::string& pid_file);

  Options options_;
  TempDir files_{"gdw-node"};
  TempDir dev_{"gdw-dev"};
  CgroupSandbox cgroups_;
  std::list<SandboxContainer> containers_;
  std::vector<SandboxContainerSpec> external_allocations_;  // stable references for callers
  // A child calling itself `comm` runs `work`, reports its answer (> 0: done), then lives on
  // until finish_lingering(). {its pid, the answer}.
  // `at_exit`: what the child does when let go, before it exits.
  // `then_exec`: after its answer it becomes that program (argv; [0] the path), its
  // standard input what ends it.
  std::pair<pid_t, pid_t> start_lingering(const char* comm, const std::function<pid_t()>& work,
                                          std::size_t touched_mb = 0, const std::function<void()>& at_exit = {},
                                          const std::vector<std::string>& then_exec = {});
  std::map<pid_t, int> lingering_;  // pid → what ends it
};

std::string random_hex(std::size_t n);
std::string random_uuid();

}  // namespace gdw::test
