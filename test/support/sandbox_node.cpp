#include "support/sandbox_node.h"

#include <fcntl.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <sys/sysmacros.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <nlohmann/json.hpp>
#include <random>
#include <set>
#include <sstream>
#include <stdexcept>

#include "kubelet/checkpoint.h"
#include "support/foreign_device_program.h"

namespace gdw::test {
namespace {

std::mt19937_64& rng() {
  static std::mt19937_64 gen{std::random_device{}()};
  return gen;
}

void make_node(const std::string& path, std::uint32_t major, std::uint32_t minor) {
  make_dirs(path.substr(0, path.rfind('/')));
  if (::mknod(path.c_str(), S_IFCHR | 0666, makedev(major, minor)) != 0)
    throw std::runtime_error("mknod " + path + " failed (root needed)");
}

std::string escape_systemd(std::string s) {
  std::replace(s.begin(), s.end(), '-', '_');
  return s;
}

}  // namespace

std::string random_hex(std::size_t n) {
  static const char* digits = "0123456789abcdef";
  std::string s;
  for (std::size_t i = 0; i < n; ++i) s += digits[rng()() % 16];
  return s;
}

std::string random_uuid() {
  std::string h = random_hex(32);
  return h.substr(0, 8) + "-" + h.substr(8, 4) + "-4" + h.substr(13, 3) + "-a" + h.substr(17, 3) + "-" + h.substr(20, 12);
}

SandboxNode::SandboxNode() : SandboxNode(Options{}) {}

FixtureMajors fixture_majors_for_host(const std::string& proc_devices) {
  std::set<std::uint32_t> held;
  std::istringstream lines(proc_devices);
  for (std::string line; std::getline(lines, line) && line.rfind("Block devices:", 0) != 0;) {
    std::istringstream fields(line);
    std::uint32_t major;
    if (fields >> major) held.insert(major);
  }
  const FixtureMajors usual;
  if (!held.contains(usual.nvidia) && !held.contains(usual.uvm) && !held.contains(usual.caps)) return usual;
  std::vector<std::uint32_t> free;
  for (auto [first, last] : {std::pair{60u, 63u}, {120u, 127u}, {240u, 254u}})
    for (std::uint32_t m = first; m <= last; ++m)
      if (!held.contains(m)) free.push_back(m);
  if (free.size() < 3) throw std::runtime_error("no three free local-use majors for the fixture nodes");
  return {free[0], free[1], free[2]};
}

std::pair<std::string, std::string> cgroup2_location() {
  if (::access("/sys/fs/cgroup/unified/cgroup.controllers", F_OK) == 0) return {"/sys/fs/cgroup", "unified"};
  return {"/sys/fs", "cgroup"};
}

std::string SandboxNode::v2_unavailable_reason() {
  if (!available(true)) {
    const auto [root, name] = cgroup2_location();
    return "needs root and a writable cgroup2 hierarchy at " + root + "/" + name;
  }
  if (ForeignProgram probe("", spec_rules()); probe.fd < 0)
    return std::string("cgroup device programs cannot be loaded here: ") + std::strerror(probe.load_errno);
  return "";
}

SandboxNode::SandboxNode(const Options& options)
    : options_(options),
      cgroups_(options.v2 ? cgroup2_location().second : "devices", options.tag,
               options.v2 ? cgroup2_location().first : "/sys/fs/cgroup") {
  const FixtureMajors& m = options_.majors;
  std::string devices = "Character devices:\n  1 mem\n  5 /dev/tty\n" + std::to_string(m.nvidia) + " nvidia\n" +
                        std::to_string(m.nvidia) + " nvidiactl\n";
  if (options_.create_uvm_nodes) devices += std::to_string(m.uvm) + " nvidia-uvm\n";
  devices += std::to_string(m.caps) + " nvidia-caps\n\nBlock devices:\n  7 loop\n";
  files_.write("proc/devices", devices);
  for (int i = 0; i < options_.gpus; ++i) {
    char bus[32];
    std::snprintf(bus, sizeof bus, "0000:%02x:00.0", 0x10 + i);
    files_.write(std::string("proc/driver/nvidia/gpus/") + bus + "/information",
                 "Model: \t\t NVIDIA H20\nIRQ:             134\nGPU UUID: \t " + gpu_uuid(i) +
                     "\nVideo BIOS: \t 96.00.af.00.01\nBus Type: \t PCIe\nDMA Size: \t 52 bits\n"
                     "DMA Mask: \t 0xfffffffffffff\nBus Location: \t " + bus + "\nDevice Minor: \t " +
                     std::to_string(i) + "\nGPU Excluded: \t No\n");
    make_node(node_path("nvidia" + std::to_string(i)), m.nvidia, static_cast<std::uint32_t>(i));
  }
  files_.write("proc/driver/nvidia-caps/mig-minors", "config 1\nmonitor 2\n");
  // The probe names v1 hierarchies by the running kernel's ids: the fixture carries the real file.
  files_.write("proc/cgroups", read_file("/proc/cgroups"));
  make_node(node_path("nvidiactl"), m.nvidia, 255);
  if (options_.create_uvm_nodes) {
    make_node(node_path("nvidia-uvm"), m.uvm, 0);
    make_node(node_path("nvidia-uvm-tools"), m.uvm, 1);
  }
  files_.mkdirs("run/containerd/io.containerd.runtime.v2.task/k8s.io");
  files_.mkdirs("crio/overlay-containers");
  files_.mkdirs("kubelet/device-plugins");
  files_.mkdirs("kubelet/pod-resources");
  files_.mkdirs("etc/cdi");
  files_.mkdirs("run/cdi");
  cgroups_.make(options_.systemd_naming ? "kubepods.slice" : "kubepods");
  write_checkpoint();
}

SandboxNode::~SandboxNode() {
  for (const auto& c : containers_) finish_runtime(c);  // before the cgroups go
  while (!lingering_.empty()) finish_lingering(lingering_.begin()->first);
}

std::string SandboxNode::gpu_uuid(int index) const {
  char uuid[64];
  std::snprintf(uuid, sizeof uuid, "GPU-%08x-e770-3ea8-8ac3-8a1d4197%04x", 0x0650a168 + index, index);
  return uuid;
}

std::string SandboxNode::kubepods_rel() const {
  return cgroups_.name() + (options_.systemd_naming ? "/kubepods.slice" : "/kubepods");
}

std::vector<OciDeviceCgroupRule> SandboxNode::spec_rules() {
  std::vector<OciDeviceCgroupRule> rules{{false, DeviceRule{}}};
  for (const auto& text : spec_allow_rules()) rules.push_back({true, *parse_device_rule(text)});
  return rules;
}

bool SandboxNode::reapply_as_old_runc(const SandboxContainer& c, const char* comm) {
  const pid_t pid = ::fork();
  if (pid < 0) return false;
  if (pid == 0) {
    ::prctl(PR_SET_NAME, comm);
    int fd = ::open((c.cgroup_dir + "/devices.deny").c_str(), O_WRONLY);
    if (fd < 0 || ::write(fd, "a", 1) != 1) _exit(1);
    ::close(fd);
    for (const auto& rule : spec_allow_rules()) {
      fd = ::open((c.cgroup_dir + "/devices.allow").c_str(), O_WRONLY);
      if (fd < 0 || ::write(fd, rule.data(), rule.size()) < 0) _exit(1);
      ::close(fd);
    }
    _exit(0);
  }
  int status = 0;
  ::waitpid(pid, &status, 0);
  return WIFEXITED(status) && WEXITSTATUS(status) == 0;
}

std::vector<std::string> SandboxNode::spec_allow_rules() {
  // runc's default device list, in its order.
  return {"c *:* m", "b *:* m", "c 1:3 rwm", "c 1:8 rwm", "c 1:7 rwm", "c 5:0 rwm",
          "c 1:5 rwm", "c 1:9 rwm", "c 5:1 rwm", "c 136:* rwm", "c 5:2 rwm", "c 10:200 rwm"};
}

SandboxContainer SandboxNode::new_container(SandboxContainerSpec spec) {
  SandboxContainer c;
  if (spec.pod_uid.empty()) spec.pod_uid = random_uuid();
  if (spec.pod_name.empty()) spec.pod_name = "pod-" + spec.pod_uid.substr(0, 5);
  if (spec.container_name.empty()) spec.container_name = "main";
  c.id = random_hex(64);
  const std::string qos = spec.qos == QosClass::kGuaranteed ? "" : to_string(spec.qos);
  const bool crio = spec.runtime == RuntimeKind::kCrio;
  if (options_.systemd_naming) {
    std::string qos_slice = qos.empty() ? "" : "kubepods-" + qos + ".slice/";
    std::string pod_slice = "kubepods-" + (qos.empty() ? "" : qos + "-") + "pod" + escape_systemd(spec.pod_uid) + ".slice";
    c.cgroup_rel = "kubepods.slice/" + qos_slice + pod_slice + (crio ? "/crio-" : "/cri-containerd-") + c.id + ".scope";
  } else {
    c.cgroup_rel = "kubepods/" + (qos.empty() ? "" : qos + "/") + "pod" + spec.pod_uid + (crio ? "/crio-" : "/") + c.id;
  }
  c.spec = std::move(spec);
  if (c.spec.with_bundle) {
    files_.write(crio ? "crio/overlay-containers/" + c.id + "/userdata/config.json"
                      : "run/containerd/io.containerd.runtime.v2.task/k8s.io/" + c.id + "/config.json",
                 bundle_json(c));
  }
  return c;
}

const SandboxContainer& SandboxNode::add_container(SandboxContainerSpec spec) {
  SandboxContainer c = new_container(std::move(spec));
  const bool crio = c.spec.runtime == RuntimeKind::kCrio;
  c.cgroup_dir = cgroups_.make(c.cgroup_rel);
  // Container creation as runc does it, then the NVIDIA hook's out-of-band grants.
  std::vector<std::string> hook_rules;
  const std::string nvidia = "c " + std::to_string(options_.majors.nvidia) + ":";
  const std::string uvm = "c " + std::to_string(options_.majors.uvm) + ":";
  if (!c.spec.device_ids.empty()) {
    if (c.spec.hook_grants_gpu) {
      for (const auto& id : c.spec.device_ids) {
        for (int i = 0; i < options_.gpus; ++i)
          if (id.rfind(gpu_uuid(i), 0) == 0) hook_rules.push_back(nvidia + std::to_string(i) + " rw");
      }
      hook_rules.push_back(nvidia + "255 rw");
    }
    if (c.spec.hook_grants_uvm && options_.create_uvm_nodes) {
      hook_rules.push_back(uvm + "0 rw");
      hook_rules.push_back(uvm + "1 rw");
    }
  }
  for (int gpu : c.spec.env_hook_gpus) hook_rules.push_back(nvidia + std::to_string(gpu) + " rw");
  if (!c.spec.env_hook_gpus.empty()) {
    hook_rules.push_back(nvidia + "255 rw");
    if (options_.create_uvm_nodes) hook_rules.push_back(uvm + "0 rw");
  }
  if (options_.v2) {
    // The runtime's program as the hook leaves it: the spec plus the GPU nodes.
    auto rules = spec_rules();
    for (const auto& text : hook_rules) rules.push_back({true, *parse_device_rule(text)});
    ForeignProgram runtime("", rules);
    if (runtime.fd < 0 || runtime.attach(c.cgroup_dir) != 0)
      throw std::runtime_error("cannot attach the runtime's device program to " + c.cgroup_dir);
  } else {
    reapply_spec(c.cgroup_rel);
    for (const auto& text : hook_rules) cgroups_.allow(c.cgroup_rel, text);
  }
  c.sleeper = cgroups_.add_sleeper(c.cgroup_rel);
  // The create has ended: the pid file the runtime writes last (runtime/bundles.h).
  if (c.spec.with_bundle) {
    files_.write(crio ? "crio/overlay-containers/" + c.id + "/userdata/pidfile"
                      : "run/containerd/io.containerd.runtime.v2.task/k8s.io/" + c.id + "/init.pid",
                 std::to_string(c.sleeper));
  }
  containers_.push_back(c);
  return containers_.back();
}

void SandboxNode::remove_container(const SandboxContainer& c) {
  finish_runtime(c);
  cgroups_.remove(c.cgroup_rel);
  remove_tree(files_.path() + "/run/containerd/io.containerd.runtime.v2.task/k8s.io/" + c.id);
  remove_tree(crio_state_dir() + "/" + c.id);
  const std::string id = c.id, pod_rel = c.cgroup_rel.substr(0, c.cgroup_rel.rfind('/'));
  std::erase_if(containers_, [&](const SandboxContainer& x) { return x.id == id; });
  // kubelet removes a pod's cgroup with its last container (cgroupfs driver: "pod<uid>";
  // a systemd slice is systemd's to remove).
  const bool cgroupfs_pod = pod_rel.compare(pod_rel.rfind('/') + 1, 3, "pod") == 0;
  const bool pod_empty = cgroupfs_pod && std::none_of(containers_.begin(), containers_.end(), [&](const SandboxContainer& x) {
    return x.cgroup_rel.rfind(pod_rel + "/", 0) == 0;
  });
  if (pod_empty) cgroups_.remove(pod_rel);
}

void SandboxNode::reapply_spec(const std::string& cgroup_rel) {
  if (options_.v2) {
    ForeignProgram systemd("sd_devices", spec_rules());
    if (systemd.fd < 0 || systemd.attach(cgroups_.path(cgroup_rel)) != 0)
      throw std::runtime_error("cannot attach systemd's device program to " + cgroup_rel);
    return;
  }
  if (int err = cgroups_.deny(cgroup_rel, "a"); err != 0)
    throw std::runtime_error("deny a on " + cgroup_rel + " failed: " + std::to_string(err));
  for (const auto& rule : spec_allow_rules()) cgroups_.allow(cgroup_rel, rule);
}

namespace {

// As the runtimes write them: the pod's annotations first, then the runtime's own keys.
nlohmann::json runtime_annotations(const SandboxContainer& c) {
  nlohmann::json a(c.spec.pod_annotations);
  if (c.spec.runtime == RuntimeKind::kCrio) {
    a["io.kubernetes.cri-o.ContainerType"] = "container";
    a["io.kubernetes.cri-o.ContainerID"] = c.id;
    a["io.kubernetes.cri-o.SandboxID"] = random_hex(64);
    a["io.kubernetes.cri-o.Labels"] = nlohmann::json{{"io.kubernetes.container.name", c.spec.container_name},
                                                     {"io.kubernetes.pod.name", c.spec.pod_name},
                                                     {"io.kubernetes.pod.namespace", c.spec.pod_namespace},
                                                     {"io.kubernetes.pod.uid", c.spec.pod_uid}}.dump();
    return a;
  }
  a["io.kubernetes.cri.container-type"] = "container";
  a["io.kubernetes.cri.container-name"] = c.spec.container_name;
  a["io.kubernetes.cri.sandbox-id"] = random_hex(64);
  a["io.kubernetes.cri.sandbox-name"] = c.spec.pod_name;
  a["io.kubernetes.cri.sandbox-namespace"] = c.spec.pod_namespace;
  a["io.kubernetes.cri.sandbox-uid"] = c.spec.pod_uid;
  return a;
}

std::vector<std::string> bundle_env(const SandboxContainerSpec& spec) {
  if (!spec.env.empty() || spec.device_ids.empty()) return spec.env;
  std::string visible;
  for (const auto& id : spec.device_ids) visible += (visible.empty() ? "" : ",") + id;
  return {"NVIDIA_VISIBLE_DEVICES=" + visible};
}

}  // namespace

std::string SandboxNode::bundle_json(const SandboxContainer& c) const {
  using json = nlohmann::json;
  json devices = json::array();
  for (const auto& [allow, rule] : spec_rules()) {
    json r = {{"allow", allow}, {"access", format_access(rule.access)}};
    if (rule.type != DeviceType::kAll) r["type"] = std::string(1, static_cast<char>(rule.type));
    if (rule.major != kAnyNumber) r["major"] = rule.major;
    if (rule.minor != kAnyNumber) r["minor"] = rule.minor;
    devices.push_back(r);
  }
  for (const auto& text : c.spec.spec_extra_allow) {
    const DeviceRule rule = *parse_device_rule(text);
    json r = {{"allow", true}, {"type", std::string(1, static_cast<char>(rule.type))}, {"access", format_access(rule.access)}};
    if (rule.major != kAnyNumber) r["major"] = rule.major;
    if (rule.minor != kAnyNumber) r["minor"] = rule.minor;
    devices.push_back(r);
  }
  json doc = {
      {"ociVersion", "1.0.2-dev"},
      {"process", {{"args", {"/pause"}}, {"env", bundle_env(c.spec)}}},
      {"annotations", runtime_annotations(c)},
      {"linux",
       {{"cgroupsPath", "/" + c.cgroup_rel}, {"resources", {{"devices", devices}}}, {"devices", json::array()}}},
  };
  return doc.dump(2);
}

void SandboxNode::allocate(const std::string& pod_uid, const std::string& container_name,
                           const std::vector<std::string>& ids, const std::string& resource) {
  SandboxContainerSpec spec;
  spec.pod_uid = pod_uid;
  spec.container_name = container_name;
  spec.device_ids = ids;
  spec.resource = resource;
  external_allocations_.push_back(spec);
}

std::string one_gpu_checkpoint(const std::string& pod_uid, const std::string& container, const std::string& gpu_uuid) {
  CheckpointWriteEntry e;
  e.pod_uid = pod_uid;
  e.container_name = container;
  e.resource = "nvidia.com/gpu";
  e.device_ids_by_numa[0] = {gpu_uuid};
  return write_checkpoint({e}, {{"nvidia.com/gpu", {gpu_uuid}}});
}

void SandboxNode::write_checkpoint() {
  std::vector<CheckpointWriteEntry> entries;
  auto add = [&](const SandboxContainerSpec& spec) {
    if (spec.device_ids.empty() && spec.device_specs.empty() && spec.cdi_devices.empty()) return;
    CheckpointWriteEntry e;
    e.pod_uid = spec.pod_uid;
    e.container_name = spec.container_name;
    e.resource = spec.resource;
    e.device_ids_by_numa[0] = spec.device_ids;
    std::string visible;
    for (const auto& id : spec.device_ids) visible += (visible.empty() ? "" : ",") + id;
    e.alloc_resp.envs["NVIDIA_VISIBLE_DEVICES"] = visible;
    e.alloc_resp.devices = spec.device_specs;
    e.alloc_resp.cdi_devices = spec.cdi_devices;
    entries.push_back(std::move(e));
  };
  for (const auto& c : containers_)
    if (c.spec.in_checkpoint) add(c.spec);
  for (const auto& spec : external_allocations_) add(spec);
  std::map<std::string, std::vector<std::string>> registered;
  for (int i = 0; i < options_.gpus; ++i) registered["nvidia.com/gpu"].push_back(gpu_uuid(i));
  const std::string dir = files_.path() + "/kubelet/device-plugins";
  const std::string tmp = dir + "/.kubelet_internal_checkpoint.tmp";
  write_file(tmp, gdw::write_checkpoint(entries, registered));
  if (::rename(tmp.c_str(), checkpoint_path().c_str()) != 0) throw std::runtime_error("rename checkpoint failed");
}

std::string SandboxNode::write_config(const std::string& extra, const std::string& kubelet_extra) const {
  // The daemon's cgroup.root: /sys/fs/cgroup, whose devices/ or unified/ it uses, or which is
  // the cgroup2 mount itself on a pure v2 host.
  const std::string& hierarchy = cgroups_.hierarchy_root();
  const std::string root = hierarchy == "/sys/fs/cgroup" ? hierarchy : hierarchy.substr(0, hierarchy.rfind('/'));
  std::string yaml = "cgroup:\n  root: " + root +
                     (options_.v2 ? "\n  version: v2" : "\n  version: v1") +
                     "\n  kubepods: " + kubepods_rel() + "\nkubelet:\n  checkpoint: " + checkpoint_path() + "\n  device_plugins_dir: " +
                     files_.path() + "/kubelet/device-plugins\n  pod_resources_socket: " + pod_resources_socket() +
                     "\n" + kubelet_extra + "cdi:\n  spec_dirs: [" + cdi_etc_dir() + ", " + cdi_run_dir() + "]\n" +
                     "runtime:\n  state_dirs: [" + state_dir() + ", " + crio_state_dir() + "]\ndevices:\n  dev_root: " + dev_root() +
                     "\n  proc_root: " + proc_root() + "\n  nvml_library: /nonexistent/libnvidia-ml.so.1\n" + extra;
  return files_.write("gpu-devwatch.yaml", yaml);
}

int SandboxNode::open_errno(const SandboxContainer& c, const std::string& node_name) {
  return cgroups_.open_errno(c.process_rel.empty() ? c.cgroup_rel : c.process_rel, node_path(node_name));
}

}  // namespace gdw::test
