#include "runtime/oci_config.h"

#include <algorithm>
#include <nlohmann/json.hpp>
#include <string_view>

#include "runtime/cgroup_names.h"

namespace gdw {
namespace {

using json = nlohmann::json;

std::string annotation(const json& annotations, std::string_view key) {
  auto it = annotations.find(key);
  return it != annotations.end() && it->is_string() ? it->get<std::string>() : std::string();
}

// A device number in a spec: absent, null or negative (runc's -1) means "*".
Result<std::uint32_t> spec_number(const json& entry, const char* key) {
  auto it = entry.find(key);
  if (it == entry.end() || it->is_null()) return kAnyNumber;
  if (!it->is_number_integer()) return Error{std::string(key) + " must be an integer"};
  // nlohmann keeps a value above INT64_MAX as unsigned: read it as such, never as int64.
  if (it->is_number_unsigned()) {
    auto v = it->get<std::uint64_t>();
    if (v >= kAnyNumber) return Error{std::string(key) + " " + std::to_string(v) + " out of range"};
    return static_cast<std::uint32_t>(v);
  }
  auto v = it->get<std::int64_t>();
  if (v < 0) return kAnyNumber;
  if (v >= static_cast<std::int64_t>(kAnyNumber)) return Error{std::string(key) + " " + std::to_string(v) + " out of range"};
  return static_cast<std::uint32_t>(v);
}

bool has_key_with_prefix(const json& annotations, std::string_view prefix) {
  for (auto it = annotations.begin(); it != annotations.end(); ++it) {
    if (std::string_view(it.key()).substr(0, prefix.size()) == prefix) return true;
  }
  return false;
}

constexpr std::string_view kContainerdPrefix = "io.kubernetes.cri.";
constexpr std::string_view kCrioPrefix = "io.kubernetes.cri-o.";
constexpr const char* kContainerdMarker = "io.kubernetes.cri.container-type";
constexpr const char* kCrioMarker = "io.kubernetes.cri-o.ContainerType";

// Rule 1 of the header: the layout decides, the runtime's own marker must be there.
RuntimeKind decide_runtime(const json& a, RuntimeKind layout, std::string& problem) {
  const bool containerd_marker = a.contains(kContainerdMarker);
  const bool crio_marker = a.contains(kCrioMarker);
  if (layout == RuntimeKind::kContainerd || layout == RuntimeKind::kCrio) {
    const bool marker = layout == RuntimeKind::kContainerd ? containerd_marker : crio_marker;
    if (marker) return layout;
    problem = std::string("bundle in ") + to_string(layout) + "'s layout has no " +
              (layout == RuntimeKind::kContainerd ? kContainerdMarker : kCrioMarker) + " annotation";
    return RuntimeKind::kUnknown;
  }
  const bool containerd_keys = has_key_with_prefix(a, kContainerdPrefix);
  const bool crio_keys = has_key_with_prefix(a, kCrioPrefix);
  if (containerd_marker && !crio_keys) return RuntimeKind::kContainerd;
  if (crio_marker && !containerd_keys) return RuntimeKind::kCrio;
  problem = containerd_keys && crio_keys
                ? "bundle carries both containerd's and CRI-O's keys (a pod can set the other runtime's): runtime unknown"
                : "bundle carries no container runtime's identity annotations";
  return RuntimeKind::kUnknown;
}

ContainerType container_type(const std::string& type) {
  if (type == "sandbox") return ContainerType::kSandbox;
  if (type == "container") return ContainerType::kContainer;
  return ContainerType::kUnknown;
}

void read_containerd_identity(const json& a, OciContainerInfo& info) {
  info.type = container_type(annotation(a, kContainerdMarker));
  info.container_name = annotation(a, "io.kubernetes.cri.container-name");
  info.pod_name = annotation(a, "io.kubernetes.cri.sandbox-name");
  info.pod_namespace = annotation(a, "io.kubernetes.cri.sandbox-namespace");
  info.pod_uid = annotation(a, "io.kubernetes.cri.sandbox-uid");
  info.sandbox_id = annotation(a, "io.kubernetes.cri.sandbox-id");
}

// CRI-O: its own keys, and kubelet's labels it stores as one JSON object string.
void read_crio_identity(const json& a, OciContainerInfo& info) {
  info.type = container_type(annotation(a, kCrioMarker));
  info.container_id = annotation(a, "io.kubernetes.cri-o.ContainerID");
  info.sandbox_id = annotation(a, "io.kubernetes.cri-o.SandboxID");
  const std::string labels_text = annotation(a, "io.kubernetes.cri-o.Labels");
  json labels = json::parse(labels_text, nullptr, false);
  if (labels.is_discarded() || !labels.is_object()) {
    if (info.type == ContainerType::kContainer) info.identity_problem = "io.kubernetes.cri-o.Labels is not a JSON object";
    return;
  }
  info.pod_name = annotation(labels, "io.kubernetes.pod.name");
  info.pod_namespace = annotation(labels, "io.kubernetes.pod.namespace");
  info.pod_uid = annotation(labels, "io.kubernetes.pod.uid");
  info.container_name = annotation(labels, "io.kubernetes.container.name");
}

void read_identity(const json& a, RuntimeKind layout, OciContainerInfo& info) {
  info.runtime = decide_runtime(a, layout, info.identity_problem);
  if (info.runtime == RuntimeKind::kContainerd) read_containerd_identity(a, info);
  if (info.runtime == RuntimeKind::kCrio) read_crio_identity(a, info);
}

Result<OciDeviceCgroupRule> parse_rule(const json& entry) {
  if (!entry.is_object()) return Error{"entry is not an object"};
  OciDeviceCgroupRule out;
  auto allow = entry.find("allow");
  if (allow == entry.end() || !allow->is_boolean()) return Error{"allow must be true or false"};
  out.allow = allow->get<bool>();
  auto type = entry.find("type");
  std::string t = type != entry.end() && type->is_string() ? type->get<std::string>() : "a";
  if (t == "a" || t.empty()) {
    out.rule.type = DeviceType::kAll;
  } else if (t == "c" || t == "u") {
    out.rule.type = DeviceType::kChar;
  } else if (t == "b") {
    out.rule.type = DeviceType::kBlock;
  } else {
    return Error{"type '" + t + "' is not a, b or c"};
  }
  auto major = spec_number(entry, "major");
  if (!major) return major.error();
  auto minor = spec_number(entry, "minor");
  if (!minor) return minor.error();
  out.rule.major = *major;
  out.rule.minor = *minor;
  auto access = entry.find("access");
  if (access == entry.end() || access->is_null() || (access->is_string() && access->get<std::string>().empty())) {
    out.rule.access = kAccessAll;  // runc: an empty access means rwm
  } else if (access->is_string()) {
    auto a = parse_access(access->get<std::string>());
    if (!a) return a.error();
    out.rule.access = *a;
  } else {
    return Error{"access must be a string"};
  }
  return out;
}

// process.env: only NVIDIA_VISIBLE_DEVICES, from a bounded number of entries. A value over
// the bound is kept cut at it plus one byte, so its parser refuses it as too long.
void read_env(const json& doc, OciContainerInfo& info) {
  auto process = doc.find("process");
  if (process == doc.end() || !process->is_object()) return;
  auto env = process->find("env");
  if (env == process->end() || !env->is_array()) return;
  constexpr std::string_view kKey = "NVIDIA_VISIBLE_DEVICES=";
  if (env->size() > kMaxEnvScan)
    info.env_problem = "process.env has " + std::to_string(env->size()) + " entries; the first " +
                       std::to_string(kMaxEnvScan) + " were read";
  const std::size_t n = std::min(env->size(), kMaxEnvScan);
  for (std::size_t i = 0; i < n; ++i) {
    const json& entry = (*env)[i];
    if (!entry.is_string()) continue;
    const std::string& text = entry.get_ref<const std::string&>();
    if (text.compare(0, kKey.size(), kKey) != 0) continue;
    info.nvidia_visible_devices = text.substr(kKey.size(), kMaxEnvValue + 1);
  }
}

}  // namespace

Result<OciContainerInfo> parse_oci_config(std::string_view json_text, RuntimeKind layout) {
  json doc = json::parse(json_text.begin(), json_text.end(), nullptr, false);
  if (doc.is_discarded()) return Error{"config.json is not valid JSON"};
  if (!doc.is_object()) return Error{"config.json is not a JSON object"};
  OciContainerInfo info;

  if (auto a = doc.find("annotations"); a != doc.end() && a->is_object()) {
    read_identity(*a, layout, info);
  } else {
    info.identity_problem = "config.json has no annotations";
  }

  auto linux_it = doc.find("linux");
  if (linux_it != doc.end() && !linux_it->is_null()) {
    const json& lx = *linux_it;
    if (!lx.is_object()) return Error{"linux must be an object"};
    if (auto cp = lx.find("cgroupsPath"); cp != lx.end() && cp->is_string()) info.cgroups_path = cp->get<std::string>();
    if (auto res = lx.find("resources"); res != lx.end() && res->is_object()) {
      if (auto devs = res->find("devices"); devs != res->end() && !devs->is_null()) {
        if (!devs->is_array()) return Error{"linux.resources.devices must be a list"};
        for (std::size_t i = 0; i < devs->size(); ++i) {
          auto rule = parse_rule((*devs)[i]);
          if (!rule) return Error{"linux.resources.devices[" + std::to_string(i) + "]: " + rule.error().message};
          info.device_rules.push_back(*rule);
        }
      }
    }
    if (auto devs = lx.find("devices"); devs != lx.end() && !devs->is_null()) {
      if (!devs->is_array()) return Error{"linux.devices must be a list"};
      for (std::size_t i = 0; i < devs->size(); ++i) {
        const json& d = (*devs)[i];
        auto where = "linux.devices[" + std::to_string(i) + "]: ";
        if (!d.is_object()) return Error{where + "not an object"};
        OciLinuxDevice dev;
        if (auto p = d.find("path"); p != d.end() && p->is_string()) dev.path = p->get<std::string>();
        if (auto t = d.find("type"); t != d.end() && t->is_string() && !t->get<std::string>().empty())
          dev.type = t->get<std::string>()[0];
        auto major = spec_number(d, "major");
        auto minor = spec_number(d, "minor");
        if (!major || !minor) return Error{where + (!major ? major.error() : minor.error()).message};
        dev.major = *major;
        dev.minor = *minor;
        info.devices.push_back(std::move(dev));
      }
    }
  }
  if (info.pod_uid.empty()) {
    if (auto uid = pod_uid_from_cgroups_path(info.cgroups_path)) info.pod_uid = *uid;
  }
  read_env(doc, info);
  return info;
}

}  // namespace gdw
