#include "support/systemd_gpu_node.h"

#include <sys/stat.h>
#include <sys/sysmacros.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <nlohmann/json.hpp>
#include <tuple>

#include "support/foreign_device_program.h"
#include "support/sandbox_node.h"

namespace gdw::test {

std::vector<std::pair<std::string, std::string>> runc_default_device_allow() {
  return {{"char-*", "m"},           {"block-*", "m"},          {"/dev/char/1:3", "rwm"}, {"/dev/char/1:8", "rwm"},
          {"/dev/char/1:7", "rwm"},  {"/dev/char/5:0", "rwm"},  {"/dev/char/1:5", "rwm"}, {"/dev/char/1:9", "rwm"},
          {"/dev/char/5:1", "rwm"},  {"char-136", "rwm"},       {"/dev/char/5:2", "rwm"}, {"/dev/char/10:200", "rwm"}};
}

SystemdGpuNode::SystemdGpuNode(NspawnSystemd& systemd) : systemd_(systemd) {
  files_.write("proc/devices", "Character devices:\n195 nvidia\n195 nvidiactl\n237 nvidia-uvm\n\nBlock devices:\n");
  files_.write("proc/driver/nvidia/gpus/0000:0f:00.0/information",
               std::string("GPU UUID: \t ") + kSystemdNodeGpu + "\nDevice Minor: \t 0\n");
  files_.mkdirs("dev");
  files_.mkdirs("run");
  for (auto [name, major, minor] : {std::tuple{"nvidia0", 195u, 0u}, {"nvidia1", 195u, 1u}, {"nvidiactl", 195u, 255u},
                                    {"nvidia-uvm", 237u, 0u}, {"nvidia-uvm-tools", 237u, 1u}}) {
    if (::mknod(node_path(name).c_str(), S_IFCHR | 0666, makedev(major, minor)) != 0) {
      error_ = "mknod " + node_path(name) + ": " + std::strerror(errno);
      return;
    }
  }
}

SystemdBootPrerequisites systemd_boot_prerequisites(CgroupMode mode) {
  SystemdBootPrerequisites p;
  if (p.skip = NspawnSystemd::unavailable_reason(mode); !p.skip.empty()) return p;
  if (mode == CgroupMode::kV2)
    if (ForeignProgram probe("", SandboxNode::spec_rules()); probe.fd < 0) {
      p.skip = std::string("cgroup device programs cannot be loaded here: ") + std::strerror(probe.load_errno);
      return p;
    }
  const BookwormRootfs rootfs = ensure_bookworm_rootfs();
  if (rootfs.path.empty())
    (rootfs.download_failed ? p.skip : p.failure) = rootfs.unavailable;
  p.rootfs = rootfs.path;
  return p;
}

ScopeContainer SystemdGpuNode::start_container(const std::vector<std::string>& properties,
                                               const std::vector<OciDeviceCgroupRule>& spec_rules, std::string* why,
                                               bool create_ended) {
  ScopeContainer c;
  c.pod_uid = random_uuid();
  c.id = random_hex(64);
  c.unit = "cri-containerd-" + c.id + ".scope";
  std::string pod_part = c.pod_uid;
  std::replace(pod_part.begin(), pod_part.end(), '-', '_');
  c.slice = "kubepods-burstable-pod" + pod_part + ".slice";
  c.pid = systemd_.start_scope(c.unit, c.slice, properties, {"/bin/sleep", "100000"}, why);
  if (c.pid <= 0) return c;
  c.cgroup = systemd_.device_cgroup_of(c.pid);
  if (c.cgroup.empty()) {
    if (why != nullptr) *why = "no device cgroup for the scope's process " + std::to_string(c.pid);
    c.pid = 0;
    return c;
  }
  // cgroup.kubepods: kubepods.slice relative to the hierarchy's root (nspawn nests the
  // machine below this process's own cgroup).
  const std::string hierarchy = systemd_.mode() == CgroupMode::kV2 ? "/sys/fs/cgroup/unified/" : "/sys/fs/cgroup/devices/";
  const auto at = c.cgroup.find("/kubepods.slice/");
  if (c.cgroup.rfind(hierarchy, 0) != 0 || at == std::string::npos) {
    if (why != nullptr) *why = "the scope's cgroup " + c.cgroup + " is not below " + hierarchy + "…/kubepods.slice";
    c.pid = 0;
    return c;
  }
  kubepods_ = c.cgroup.substr(hierarchy.size(), at + 15 - hierarchy.size());
  nlohmann::json devices = nlohmann::json::array();
  for (const auto& [allow, rule] : spec_rules) {
    nlohmann::json r = {{"allow", allow}, {"access", format_access(rule.access)}};
    if (rule.type != DeviceType::kAll) r["type"] = std::string(1, static_cast<char>(rule.type));
    if (rule.major != kAnyNumber) r["major"] = rule.major;
    if (rule.minor != kAnyNumber) r["minor"] = rule.minor;
    devices.push_back(r);
  }
  const nlohmann::json spec = {
      {"annotations",
       {{"io.kubernetes.cri.container-type", "container"}, {"io.kubernetes.cri.container-name", "cuda"},
        {"io.kubernetes.cri.sandbox-name", "cuda-0"}, {"io.kubernetes.cri.sandbox-namespace", "ml"},
        {"io.kubernetes.cri.sandbox-uid", c.pod_uid}}},
      {"linux", {{"cgroupsPath", c.slice + ":cri-containerd:" + c.id}, {"resources", {{"devices", devices}}}}}};
  files_.write("run/" + c.id + "/config.json", spec.dump());
  // Started already (the scope's process runs): the pid file the runtime writes last.
  if (create_ended) end_create(c);
  files_.write("kubelet/kubelet_internal_checkpoint", one_gpu_checkpoint(c.pod_uid, "cuda", kSystemdNodeGpu));
  return c;
}

void SystemdGpuNode::end_create(const ScopeContainer& c) { files_.write("run/" + c.id + "/init.pid", std::to_string(c.pid)); }

std::vector<std::string> SystemdGpuNode::unit_dirs() const {
  return {systemd_.root_path("/run/systemd/system.control"), systemd_.root_path("/run/systemd/transient")};
}

std::string SystemdGpuNode::config(int port, const std::string& extra) const {
  const bool v2 = systemd_.mode() == CgroupMode::kV2;
  const auto dirs = unit_dirs();
  return files_.write("config.yaml",
                      std::string("cgroup:\n  root: /sys/fs/cgroup\n  version: ") + (v2 ? "v2" : "v1") +
                          "\n  kubepods: " + kubepods_ + "\nkubelet:\n  checkpoint: " +
                          files_ / "kubelet/kubelet_internal_checkpoint" + "\n  device_plugins_dir: " +
                          files_ / "kubelet" + "\n  pod_resources_socket: " + files_ / "none.sock" +
                          "\nruntime:\n  state_dirs: [" + files_ / "run" + "]\ndevices:\n  dev_root: " +
                          files_ / "dev" + "\n  proc_root: " + files_ / "proc" +
                          "\nsystemd:\n  bus_address: " + systemd_.bus_address() + "\n  unit_dirs: [" + dirs[0] +
                          ", " + dirs[1] + "]\nmetrics:\n  listen: 127.0.0.1:" + std::to_string(port) + "\n" + extra);
}

int SystemdGpuNode::open_errno(const ScopeContainer& c, const std::string& name) const {
  return open_errno_in_cgroup(c.cgroup, node_path(name));
}

}  // namespace gdw::test
