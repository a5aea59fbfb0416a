#include "core/config.h"

#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <charconv>
#include <functional>
#include <optional>
#include <set>

namespace gdw {
namespace {

// A setter reads one key's YAML node into the config; it returns the problem, if any.
using Problem = std::optional<std::string>;
using Setter = std::function<Problem(const YAML::Node&, Config&)>;

Problem as_string(const YAML::Node& n, std::string& out) {
  if (!n.IsScalar()) return "expected a string";
  out = n.Scalar();
  return std::nullopt;
}

Problem as_bool(const YAML::Node& n, bool& out) {
  if (!n.IsScalar()) return "expected true or false";
  const std::string& s = n.Scalar();
  if (s == "true" || s == "True" || s == "TRUE") {
    out = true;
  } else if (s == "false" || s == "False" || s == "FALSE") {
    out = false;
  } else {
    return "expected true or false, got '" + s + "'";
  }
  return std::nullopt;
}

Problem as_uint(const YAML::Node& n, std::uint32_t& out, std::uint32_t min, std::uint32_t max) {
  if (!n.IsScalar()) return "expected an integer";
  const std::string& s = n.Scalar();
  std::uint64_t v = 0;
  auto [p, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
  if (s.empty() || ec != std::errc() || p != s.data() + s.size()) return "expected an integer, got '" + s + "'";
  if (v < min || v > max)
    return "must be between " + std::to_string(min) + " and " + std::to_string(max) + ", got " + s;
  out = static_cast<std::uint32_t>(v);
  return std::nullopt;
}

Problem as_absolute_path(const YAML::Node& n, std::string& out) {
  if (auto p = as_string(n, out)) return p;
  if (out.empty() || out[0] != '/') return "must be an absolute path, got '" + out + "'";
  while (out.size() > 1 && out.back() == '/') out.pop_back();
  return std::nullopt;
}

Problem as_string_list(const YAML::Node& n, std::vector<std::string>& out) {
  if (!n.IsSequence()) return "expected a list of strings";
  std::vector<std::string> items;
  for (const auto& item : n) {
    if (!item.IsScalar() || item.Scalar().empty()) return "expected a list of non-empty strings";
    items.push_back(item.Scalar());
  }
  out = std::move(items);
  return std::nullopt;
}

Problem as_duration(const YAML::Node& n, Duration& out, Duration min, Duration max) {
  if (!n.IsScalar()) return "expected a duration such as 500ms, 30s, 5m";
  auto d = parse_duration(n.Scalar());
  if (!d) return d.error().message;
  if (*d < min || *d > max)
    return "must be between " + format_duration(min) + " and " + format_duration(max) + ", got " + n.Scalar();
  out = *d;
  return std::nullopt;
}

template <class E>
Problem as_enum(const YAML::Node& n, E& out, std::initializer_list<std::pair<const char*, E>> choices) {
  std::string s;
  if (auto p = as_string(n, s)) return p;
  std::string names;
  for (const auto& [name, value] : choices) {
    if (s == name) {
      out = value;
      return std::nullopt;
    }
    names += names.empty() ? name : std::string(" | ") + name;
  }
  return "must be one of " + names + ", got '" + s + "'";
}

Problem as_listen_address(const YAML::Node& n, std::string& out) {
  if (auto p = as_string(n, out)) return p;
  if (out.empty()) return std::nullopt;  // no HTTP server
  auto colon = out.rfind(':');
  if (colon == std::string::npos) return "must be host:port, :port or empty, got '" + out + "'";
  std::string host = out.substr(0, colon);
  if (host.size() >= 2 && host.front() == '[' && host.back() != ']') return "bad IPv6 host in '" + out + "'";
  std::string port = out.substr(colon + 1);
  std::uint32_t v = 0;
  auto [p, ec] = std::from_chars(port.data(), port.data() + port.size(), v);
  if (port.empty() || ec != std::errc() || p != port.data() + port.size() || v == 0 || v > 65535)
    return "port must be 1-65535 in '" + out + "'";
  return std::nullopt;
}

Problem as_relative_cgroup(const YAML::Node& n, std::string& out) {
  if (auto p = as_string(n, out)) return p;
  while (!out.empty() && out.front() == '/') out.erase(out.begin());
  while (!out.empty() && out.back() == '/') out.pop_back();
  if (out.find("..") != std::string::npos) return "must not contain '..'";
  return std::nullopt;
}

Problem as_node_names(const YAML::Node& n, std::vector<std::string>& out) {
  std::vector<std::string> names;
  if (auto p = as_string_list(n, names)) return p;
  for (const auto& name : names) {
    if (name.front() == '/' || name.find("..") != std::string::npos)
      return "'" + name + "' must be a node name relative to devices.dev_root";
  }
  out = std::move(names);
  return std::nullopt;
}

Problem as_mig_map(const YAML::Node& n, std::vector<MigDevice>& out) {
  if (n.IsNull()) {
    out.clear();
    return std::nullopt;
  }
  if (!n.IsMap()) return "expected a mapping of MIG UUID to {gpu, gi, ci}";
  std::vector<MigDevice> migs;
  for (const auto& kv : n) {
    const std::string uuid = kv.first.Scalar();
    std::string where = "'" + uuid + "' (line " + std::to_string(kv.first.Mark().line + 1) + ")";
    if (uuid.rfind("MIG-", 0) != 0) return where + ": key must be a MIG UUID (MIG-…)";
    const YAML::Node& v = kv.second;
    if (!v.IsMap()) return where + ": expected {gpu: N, gi: N, ci: N}";
    MigDevice mig;
    mig.uuid = uuid;
    std::set<std::string> seen;
    for (const auto& f : v) {
      const std::string field = f.first.Scalar();
      std::uint32_t* target = field == "gpu" ? &mig.gpu_minor
                              : field == "gi" ? &mig.gpu_instance
                              : field == "ci" ? &mig.compute_instance
                                              : nullptr;
      if (!target) return where + ": unknown field '" + field + "' (expected gpu, gi, ci)";
      if (auto p = as_uint(f.second, *target, 0, 255)) return where + "." + field + ": " + *p;
      seen.insert(field);
    }
    if (seen.size() != 3) return where + ": needs all of gpu, gi, ci";
    migs.push_back(mig);
  }
  out = std::move(migs);
  return std::nullopt;
}

const std::map<std::string, Setter>& setters() {
  using D = Duration;
  static const std::map<std::string, Setter> table = {
      {"mode", [](auto& n, Config& c) {
         return as_enum(n, c.mode, {{"enforce", Mode::kEnforce}, {"observe", Mode::kObserve}});
       }},
      {"cgroup.root", [](auto& n, Config& c) { return as_absolute_path(n, c.cgroup.root); }},
      {"cgroup.kubepods", [](auto& n, Config& c) { return as_relative_cgroup(n, c.cgroup.kubepods); }},
      {"cgroup.version", [](auto& n, Config& c) {
         return as_enum(n, c.cgroup.version,
                        {{"auto", CgroupVersion::kAuto}, {"v1", CgroupVersion::kV1}, {"v2", CgroupVersion::kV2}});
       }},
      {"cgroup.driver", [](auto& n, Config& c) {
         return as_enum(n, c.cgroup.driver,
                        {{"auto", CgroupDriver::kAuto},
                         {"cgroupfs", CgroupDriver::kCgroupfs},
                         {"systemd", CgroupDriver::kSystemd}});
       }},
      {"kubelet.root_dir", [](auto& n, Config& c) { return as_absolute_path(n, c.kubelet.root_dir); }},
      {"kubelet.checkpoint", [](auto& n, Config& c) { return as_absolute_path(n, c.kubelet.checkpoint); }},
      {"kubelet.on_invalid_checksum", [](auto& n, Config& c) {
         return as_enum(n, c.kubelet.on_invalid_checksum,
                        {{"use", InvalidChecksumPolicy::kUse}, {"ignore", InvalidChecksumPolicy::kIgnore}});
       }},
      {"kubelet.source", [](auto& n, Config& c) {
         return as_enum(n, c.kubelet.source,
                        {{"auto", AllocationSource::kAuto},
                         {"checkpoint", AllocationSource::kCheckpoint},
                         {"pod-resources", AllocationSource::kPodResources}});
       }},
      {"kubelet.pod_resources_socket",
       [](auto& n, Config& c) { return as_absolute_path(n, c.kubelet.pod_resources_socket); }},
      {"kubelet.pod_resources_timeout",
       [](auto& n, Config& c) { return as_duration(n, c.kubelet.pod_resources_timeout, D{10}, D{60000}); }},
      {"kubelet.pod_resources_interval",
       [](auto& n, Config& c) { return as_duration(n, c.kubelet.pod_resources_interval, D{100}, D{3600000}); }},
      {"kubelet.device_plugins_dir",
       [](auto& n, Config& c) { return as_absolute_path(n, c.kubelet.device_plugins_dir); }},
      {"kubelet.plugin_probe_interval",
       [](auto& n, Config& c) { return as_duration(n, c.kubelet.plugin_probe_interval, D{1000}, D{3600000}); }},
      {"kubelet.plugin_probe_timeout",
       [](auto& n, Config& c) { return as_duration(n, c.kubelet.plugin_probe_timeout, D{10}, D{60000}); }},
      {"kubelet.remediate_stale_checkpoint",
       [](auto& n, Config& c) { return as_bool(n, c.kubelet.remediate_stale_checkpoint); }},
      {"kubelet.stale_confirm_after",
       [](auto& n, Config& c) { return as_duration(n, c.kubelet.stale_confirm_after, D{100}, D{86400000}); }},
      {"kubelet.unit", [](auto& n, Config& c) {
         if (auto p = as_string(n, c.kubelet.unit)) return p;
         return c.kubelet.unit.empty() ? Problem("must name a systemd unit") : std::nullopt;
       }},
      {"runtime.state_dirs", [](auto& n, Config& c) -> Problem {
         std::vector<std::string> dirs;
         if (auto p = as_string_list(n, dirs)) return p;
         for (const auto& d : dirs)
           if (d[0] != '/') return "'" + d + "' must be an absolute path";
         c.runtime.state_dirs = std::move(dirs);
         return std::nullopt;
       }},
      // Removed: a cgroup v2 repair no longer rebuilds the runtime's device list from a guess
      // of its built-in devices; it adds the wanted devices to the programs in force. A
      // config that still sets it is told so rather than silently ignored.
      {"runtime.builtin_devices", [](auto&, Config&) -> Problem {
         return "was removed: cgroup v2 repairs now keep each runtime's own device list and only add the "
                "allocated devices; delete this key";
       }},
      {"devices.dev_root", [](auto& n, Config& c) { return as_absolute_path(n, c.devices.dev_root); }},
      {"devices.proc_root", [](auto& n, Config& c) { return as_absolute_path(n, c.devices.proc_root); }},
      {"devices.resources", [](auto& n, Config& c) -> Problem {
         if (auto p = as_string_list(n, c.devices.resources)) return p;
         if (c.devices.resources.empty()) return "must list at least one resource name or glob";
         return std::nullopt;
       }},
      {"devices.control", [](auto& n, Config& c) { return as_node_names(n, c.devices.control); }},
      {"devices.dra_drivers", [](auto& n, Config& c) { return as_string_list(n, c.devices.dra_drivers); }},
      {"cdi.spec_dirs", [](auto& n, Config& c) -> Problem {
         if (auto p = as_string_list(n, c.cdi.spec_dirs)) return p;
         for (const auto& dir : c.cdi.spec_dirs)
           if (dir.front() != '/') return "'" + dir + "' must be an absolute path";
         return std::nullopt;
       }},
      {"devices.nvml_library", [](auto& n, Config& c) { return as_string(n, c.devices.nvml_library); }},
      {"devices.nvml_timeout",
       [](auto& n, Config& c) { return as_duration(n, c.devices.nvml_timeout, D{100}, D{600000}); }},
      {"devices.mig_map", [](auto& n, Config& c) { return as_mig_map(n, c.devices.mig_map); }},
      {"devices.env_visible", [](auto& n, Config& c) {
         return as_enum(n, c.devices.env_visible,
                        {{"report", EnvVisiblePolicy::kReport}, {"restore", EnvVisiblePolicy::kRestore}});
       }},
      {"repair.burst", [](auto& n, Config& c) { return as_uint(n, c.repair.burst, 1, 1000000); }},
      {"repair.max_per_minute", [](auto& n, Config& c) { return as_uint(n, c.repair.max_per_minute, 1, 600000); }},
      {"repair.log_burst", [](auto& n, Config& c) { return as_uint(n, c.repair.log_burst, 1, 10000); }},
      {"repair.log_interval",
       [](auto& n, Config& c) { return as_duration(n, c.repair.log_interval, D{100}, D{3600000}); }},
      {"repair.rejected_backoff",
       [](auto& n, Config& c) { return as_duration(n, c.repair.rejected_backoff, D{100}, D{3600000}); }},
      {"daemon.resync_interval",
       [](auto& n, Config& c) { return as_duration(n, c.daemon.resync_interval, D{1000}, D{86400000}); }},
      {"daemon.program_query_interval",
       [](auto& n, Config& c) { return as_duration(n, c.daemon.program_query_interval, D{100}, D{3600000}); }},
      {"daemon.event_loop_slice_us", [](auto& n, Config& c) -> Problem {
         // The kernel takes 100 us to 100 ms (EEVDF's clamp); 0 gives its default back.
         if (auto p = as_uint(n, c.daemon.event_loop_slice_us, 0, 100000)) return p;
         if (c.daemon.event_loop_slice_us != 0 && c.daemon.event_loop_slice_us < 100)
           return "must be 0 or between 100 and 100000, got " + n.Scalar();
         return std::nullopt;
       }},
      {"metrics.listen", [](auto& n, Config& c) { return as_listen_address(n, c.metrics.listen); }},
      {"metrics.web_config",
       [](auto& n, Config& c) {  // null or "": off
         if (n.IsNull() || (n.IsScalar() && n.Scalar().empty())) return c.metrics.web_config.clear(), Problem{};
         return as_absolute_path(n, c.metrics.web_config);
       }},
      {"metrics.health_stale_after",
       [](auto& n, Config& c) { return as_duration(n, c.metrics.health_stale_after, D{1000}, D{3600000}); }},
      {"probe.enabled", [](auto& n, Config& c) { return as_bool(n, c.probe.enabled); }},
      {"probe.syscall_hook", [](auto& n, Config& c) {
         return as_enum(n, c.probe.syscall_hook,
                        {{"auto", SyscallHookPolicy::kAuto},
                         {"always", SyscallHookPolicy::kAlways},
                         {"on-drift", SyscallHookPolicy::kOnDrift},
                         {"off", SyscallHookPolicy::kOff}});
       }},
      {"probe.syscall_hook_linger",
       [](auto& n, Config& c) { return as_duration(n, c.probe.syscall_hook_linger, D{0}, D{86400000}); }},
      {"systemd.bus_address", [](auto& n, Config& c) { return as_string(n, c.systemd.bus_address); }},
      {"systemd.timeout", [](auto& n, Config& c) { return as_duration(n, c.systemd.timeout, D{10}, D{60000}); }},
      {"systemd.unit_dirs", [](auto& n, Config& c) -> Problem {
         std::vector<std::string> dirs;
         if (auto p = as_string_list(n, dirs)) return p;
         for (const auto& d : dirs)
           if (d.empty() || d[0] != '/') return "'" + d + "' must be an absolute path";
         c.systemd.unit_dirs = std::move(dirs);
         return std::nullopt;
       }},
      {"kubernetes.api_server", [](auto& n, Config& c) -> Problem {
         if (auto p = as_string(n, c.kubernetes.api_server)) return p;
         while (!c.kubernetes.api_server.empty() && c.kubernetes.api_server.back() == '/') c.kubernetes.api_server.pop_back();
         const std::string& url = c.kubernetes.api_server;
         if (url.empty()) return std::nullopt;  // in-cluster: KUBERNETES_SERVICE_HOST/_PORT
         if (url.rfind("https://", 0) != 0 || url.size() == 8 || url.find_first_of("/?# ", 8) != std::string::npos)
           return "must be https://host[:port] or empty, got '" + url + "'";
         return std::nullopt;
       }},
      {"kubernetes.token_file", [](auto& n, Config& c) { return as_absolute_path(n, c.kubernetes.token_file); }},
      {"kubernetes.ca_file", [](auto& n, Config& c) { return as_absolute_path(n, c.kubernetes.ca_file); }},
      {"events.enabled", [](auto& n, Config& c) {
         return as_enum(n, c.events.enabled,
                        {{"auto", EventsPolicy::kAuto}, {"true", EventsPolicy::kOn}, {"false", EventsPolicy::kOff}});
       }},
      {"events.pod_writes_per_minute",
       [](auto& n, Config& c) { return as_uint(n, c.events.pod_writes_per_minute, 1, 600); }},
      {"conditions.enabled", [](auto& n, Config& c) {
         return as_enum(n, c.conditions.enabled,
                        {{"auto", EventsPolicy::kAuto}, {"true", EventsPolicy::kOn}, {"false", EventsPolicy::kOff}});
       }},
      {"conditions.grace", [](auto& n, Config& c) { return as_duration(n, c.conditions.grace, D{0}, D{3600000}); }},
      {"conditions.resync",
       [](auto& n, Config& c) { return as_duration(n, c.conditions.resync, D{1000}, D{86400000}); }},
      {"conditions.readiness_gate", [](auto& n, Config& c) { return as_bool(n, c.conditions.readiness_gate); }},
      {"log.level", [](auto& n, Config& c) {
         if (auto p = as_string(n, c.log.level)) return p;
         static const std::set<std::string> levels = {"trace", "debug", "info", "warn", "error"};
         return levels.count(c.log.level) ? std::nullopt
                                          : Problem("must be one of trace | debug | info | warn | error, got '" +
                                                    c.log.level + "'");
       }},
  };
  return table;
}

bool is_section(const std::string& path) {
  const auto& table = setters();
  auto it = table.lower_bound(path + ".");
  return it != table.end() && it->first.rfind(path + ".", 0) == 0;
}

Status walk(const YAML::Node& node, const std::string& prefix, Config& config, const std::string& file) {
  auto at = [&](const YAML::Node& n) { return file + ":" + std::to_string(n.Mark().line + 1) + ": "; };
  if (node.IsNull()) return {};
  if (!node.IsMap()) {
    return Error{at(node) + (prefix.empty() ? std::string("the document") : prefix) + ": expected a mapping of keys"};
  }
  std::set<std::string> seen;
  for (const auto& kv : node) {
    if (!kv.first.IsScalar()) return Error{at(kv.first) + "keys must be plain strings"};
    const std::string path = prefix.empty() ? kv.first.Scalar() : prefix + "." + kv.first.Scalar();
    if (!seen.insert(kv.first.Scalar()).second) return Error{at(kv.first) + path + ": duplicate key"};
    const auto& table = setters();
    if (auto it = table.find(path); it != table.end()) {
      const YAML::Node& value = kv.second;
      // A key with no value has no line of its own: point at the key.
      const YAML::Node& where = value.IsNull() ? kv.first : value;
      if (auto problem = it->second(value, config)) return Error{at(where) + path + ": " + *problem};
    } else if (is_section(path)) {
      if (auto s = walk(kv.second, path, config, file); !s) return s;
    } else {
      return Error{at(kv.first) + "unknown key '" + path + "'"};
    }
  }
  return {};
}

}  // namespace

Result<Duration> parse_duration(std::string_view text) {
  std::size_t i = 0;
  while (i < text.size() && text[i] >= '0' && text[i] <= '9') ++i;
  if (i == 0) return Error{"expected a duration such as 500ms, 30s, 5m, got '" + std::string(text) + "'"};
  std::uint64_t n = 0;
  auto [p, ec] = std::from_chars(text.data(), text.data() + i, n);
  if (ec != std::errc() || n > 1'000'000'000ULL) return Error{"duration '" + std::string(text) + "' is too large"};
  std::string_view unit = text.substr(i);
  std::uint64_t ms;
  if (unit == "ms") {
    ms = n;
  } else if (unit == "s") {
    ms = n * 1000;
  } else if (unit == "m") {
    ms = n * 60'000;
  } else if (unit == "h") {
    ms = n * 3'600'000;
  } else {
    return Error{"duration '" + std::string(text) + "' needs a unit: ms, s, m or h"};
  }
  return Duration{static_cast<Duration::rep>(ms)};
}

std::string format_duration(Duration d) {
  auto ms = d.count();
  if (ms % 3'600'000 == 0 && ms != 0) return std::to_string(ms / 3'600'000) + "h";
  if (ms % 60'000 == 0 && ms != 0) return std::to_string(ms / 60'000) + "m";
  if (ms % 1000 == 0 && ms != 0) return std::to_string(ms / 1000) + "s";
  return std::to_string(ms) + "ms";
}

namespace {

// The kubelet paths that live under kubelet.root_dir unless the file names them itself.
struct KubeletRootPath {
  std::string Config::Kubelet::*field;
  const char* under_root;
};
constexpr KubeletRootPath kKubeletRootPaths[] = {
    {&Config::Kubelet::checkpoint, "/device-plugins/kubelet_internal_checkpoint"},
    {&Config::Kubelet::pod_resources_socket, "/pod-resources/kubelet.sock"},
    {&Config::Kubelet::device_plugins_dir, "/device-plugins"},
};

}  // namespace

Result<Config> parse_config(std::string_view yaml_text, const std::string& file_name) {
  Config config;
  // Empty marks "not set by the file" (an explicit key must be an absolute path).
  for (const auto& p : kKubeletRootPaths) (config.kubelet.*p.field).clear();
  try {
    YAML::Node root = YAML::Load(std::string(yaml_text));
    if (auto s = walk(root, "", config, file_name); !s) return s.error();
  } catch (const YAML::Exception& e) {
    return Error{file_name + ":" + std::to_string(e.mark.line + 1) + ": invalid YAML: " + e.msg};
  }
  const std::string root = config.kubelet.root_dir == "/" ? "" : config.kubelet.root_dir;
  for (const auto& p : kKubeletRootPaths) {
    if ((config.kubelet.*p.field).empty()) config.kubelet.*p.field = root + p.under_root;
  }
  return config;
}

std::vector<std::string> config_keys() {
  std::vector<std::string> keys;
  for (const auto& [k, v] : setters()) keys.push_back(k);
  return keys;
}

std::string to_string(Mode m) { return m == Mode::kEnforce ? "enforce" : "observe"; }
std::string to_string(CgroupVersion v) {
  return v == CgroupVersion::kAuto ? "auto" : v == CgroupVersion::kV1 ? "v1" : "v2";
}
std::string to_string(CgroupDriver d) {
  return d == CgroupDriver::kAuto ? "auto" : d == CgroupDriver::kCgroupfs ? "cgroupfs" : "systemd";
}
std::string to_string(AllocationSource s) {
  return s == AllocationSource::kAuto ? "auto" : s == AllocationSource::kCheckpoint ? "checkpoint" : "pod-resources";
}

std::string to_string(SyscallHookPolicy p) {
  switch (p) {
    case SyscallHookPolicy::kAuto: return "auto";
    case SyscallHookPolicy::kAlways: return "always";
    case SyscallHookPolicy::kOnDrift: return "on-drift";
    case SyscallHookPolicy::kOff: return "off";
  }
  return "auto";
}

}  // namespace gdw
