#include "app/check_exposure.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

namespace gdw {

using json = nlohmann::ordered_json;

std::string check_who(const ContainerTarget& t) {
  if (!t.identity) return "pod " + t.cgroup.pod.pod_uid + " container " + t.cgroup.leaf.container_id.substr(0, 12);
  return t.identity->pod_namespace + "/" + t.identity->pod_name + "/" + t.identity->container_name;
}

void print_exposure_text(const std::vector<const ContainerTarget*>& gpu_targets) {
  std::size_t containers = 0, devices = 0;
  for (const ContainerTarget* t : gpu_targets) {
    if (!t->exposure.device_allow_problem.empty())
      fmt::print("{}: scope DeviceAllow= not read ({}): only the OCI spec judged\n", check_who(*t),
                 t->exposure.device_allow_problem);
    if (t->exposure.exposed.empty()) continue;
    ++containers;
    devices += t->exposure.exposed.size();
    std::vector<std::string> parts;
    for (const auto& d : t->exposure.exposed) parts.push_back(d.device.name + " (" + exposure_reason(d) + ")");
    fmt::print("EXPOSED {}: the next re-apply would revoke {}\n", check_who(*t), fmt::join(parts, ", "));
  }
  if (containers > 0)
    fmt::print("{} GPU container(s) exposed, {} device(s): allowed now but not by the OCI spec or the scope's "
               "DeviceAllow= (passDeviceSpecs or CDI put them there)\n",
               containers, devices);
}

void add_exposure_json(const ContainerTarget& t, json& c) {
  json exposed = json::array();
  for (const auto& d : t.exposure.exposed)
    exposed.push_back({{"device", d.device.name}, {"rule", format_device_rule(DeviceRule{d.device.dev.type,
                                                                                           d.device.dev.major,
                                                                                           d.device.dev.minor,
                                                                                           d.device.access})},
                       {"spec_denies", d.spec}, {"device_allow_denies", d.device_allow}});
  c["exposed"] = exposed;
  c["exposed_devices"] = t.exposure.exposed.size();
  c["device_allow"] = {{"checked", t.exposure.device_allow_checked}, {"problem", t.exposure.device_allow_problem}};
}

void print_env_visible_text(const std::vector<const ContainerTarget*>& env_targets) {
  if (env_targets.empty()) return;
  fmt::print("\nGPUs reached through NVIDIA_VISIBLE_DEVICES without an allocation ({} container(s)):\n",
             env_targets.size());
  for (const ContainerTarget* t : env_targets) {
    const EnvVisibleGpus& e = *t->env_visible;
    std::vector<std::string> nodes;
    for (const auto& w : e.desired.wanted) nodes.push_back(w.name);
    fmt::print("  ENV-ONLY {}: NVIDIA_VISIBLE_DEVICES={} -> {} ({})\n", check_who(*t), e.value,
               e.device_ids.empty() ? std::string("-") : fmt::format("{}", fmt::join(e.device_ids, " ")),
               e.restored ? "restored: devices.env_visible is restore"
                          : "reported only: not restored after a re-apply (devices.env_visible: report)");
    for (const auto& u : e.desired.unresolved) fmt::print("    {}\n", u);
  }
}

json env_visible_json(const std::vector<const ContainerTarget*>& env_targets) {
  json out = json::array();
  for (const ContainerTarget* t : env_targets) {
    const EnvVisibleGpus& e = *t->env_visible;
    json nodes = json::array();
    for (const auto& w : e.desired.wanted) nodes.push_back(w.name);
    out.push_back({{"namespace", t->identity ? t->identity->pod_namespace : ""},
                   {"pod", t->identity ? t->identity->pod_name : ""},
                   {"container", t->identity ? t->identity->container_name : ""},
                   {"pod_uid", t->cgroup.pod.pod_uid},
                   {"cgroup", t->cgroup.cgroup_dir},
                   {"value", e.value},
                   {"device_ids", e.device_ids},
                   {"devices", nodes},
                   {"restored", e.restored},
                   {"unresolved", e.desired.unresolved}});
  }
  return out;
}

}  // namespace gdw
