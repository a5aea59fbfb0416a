#include "runtime/oci_config.h"

#include <nlohmann/json.hpp>

#include "runtime/cgroup_names.h"

namespace gdw {
namespace {

using json = nlohmann::json;

std::string annotation(const json& annotations, const char* key) {
  auto it = annotations.find(key);
  return it != annotations.end() && it->is_string() ? it->get<std::string>() : std::string();
}

// A device number in a spec: absent, null or negative (runc's -1) means "*".
Result<std::uint32_t> spec_number(const json& entry, const char* key) {
  auto it = entry.find(key);
  if (it == entry.end() || it->is_null()) return kAnyNumber;
  if (!it->is_number_integer()) return Error{std::string(key) + " must be an integer"};
  auto v = it->get<std::int64_t>();
  if (v < 0) return kAnyNumber;
  if (v >= static_cast<std::int64_t>(kAnyNumber)) return Error{std::string(key) + " out of range"};
  return static_cast<std::uint32_t>(v);
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

}  // namespace

Result<OciContainerInfo> parse_oci_config(std::string_view json_text) {
  json doc = json::parse(json_text.begin(), json_text.end(), nullptr, false);
  if (doc.is_discarded()) return Error{"config.json is not valid JSON"};
  if (!doc.is_object()) return Error{"config.json is not a JSON object"};
  OciContainerInfo info;

  if (auto a = doc.find("annotations"); a != doc.end() && a->is_object()) {
    // containerd (CRI plugin)
    std::string type = annotation(*a, "io.kubernetes.cri.container-type");
    info.container_name = annotation(*a, "io.kubernetes.cri.container-name");
    info.pod_name = annotation(*a, "io.kubernetes.cri.sandbox-name");
    info.pod_namespace = annotation(*a, "io.kubernetes.cri.sandbox-namespace");
    info.pod_uid = annotation(*a, "io.kubernetes.cri.sandbox-uid");
    info.sandbox_id = annotation(*a, "io.kubernetes.cri.sandbox-id");
    // CRI-O
    if (type.empty()) type = annotation(*a, "io.kubernetes.cri-o.ContainerType");
    if (info.container_name.empty()) info.container_name = annotation(*a, "io.kubernetes.container.name");
    if (info.pod_name.empty()) info.pod_name = annotation(*a, "io.kubernetes.pod.name");
    if (info.pod_namespace.empty()) info.pod_namespace = annotation(*a, "io.kubernetes.pod.namespace");
    if (info.pod_uid.empty()) info.pod_uid = annotation(*a, "io.kubernetes.pod.uid");
    if (info.sandbox_id.empty()) info.sandbox_id = annotation(*a, "io.kubernetes.cri-o.SandboxID");
    if (type == "sandbox") {
      info.type = ContainerType::kSandbox;
    } else if (type == "container") {
      info.type = ContainerType::kContainer;
    }
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
  return info;
}

}  // namespace gdw
