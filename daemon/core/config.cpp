#include "core/config.h"

#include "core/config_values.h"

#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <charconv>
#include <functional>
#include <optional>
#include <set>

namespace gdw {
namespace {

namespace cv = config_values;
using cv::Problem;
using D = Duration;

// One key of the file: its dotted name and what reading it does (a member, its kind of
// value and the checks on it, bound by the helpers below).
struct ConfigKey {
  std::string_view name;
  std::function<Problem(const YAML::Node&, Config&)> read;
};

template <class T, class Reader>
ConfigKey key(std::string_view name, T Config::*member, Reader reader) {
  return {name, [member, reader](const YAML::Node& n, Config& c) { return reader(n, c.*member); }};
}

template <class Section, class T, class Reader>
ConfigKey key(std::string_view name, Section Config::*section, T Section::*member, Reader reader) {
  return {name, [section, member, reader](const YAML::Node& n, Config& c) { return reader(n, c.*section.*member); }};
}

// A key that was taken out: a file that still sets it is told so rather than silently ignored.
ConfigKey removed(std::string_view name, const char* why) {
  return {name, [why](const YAML::Node&, Config&) -> Problem { return std::string(why); }};
}

using C = Config;
// Every key of the configuration file, sorted by name.
const ConfigKey kKeys[] = {
    key("cdi.spec_dirs", &C::cdi, &C::Cdi::spec_dirs, cv::AbsolutePaths{}),
    key("cgroup.driver", &C::cgroup, &C::Cgroup::driver,
        cv::OneOf<CgroupDriver>{{{"auto", CgroupDriver::kAuto}, {"cgroupfs", CgroupDriver::kCgroupfs},
                                 {"systemd", CgroupDriver::kSystemd}}}),
    key("cgroup.kubepods", &C::cgroup, &C::Cgroup::kubepods, cv::RelativeCgroup{}),
    key("cgroup.root", &C::cgroup, &C::Cgroup::root, cv::AbsolutePath{}),
    key("cgroup.version", &C::cgroup, &C::Cgroup::version,
        cv::OneOf<CgroupVersion>{{{"auto", CgroupVersion::kAuto}, {"v1", CgroupVersion::kV1},
                                  {"v2", CgroupVersion::kV2}}}),
    key("conditions.enabled", &C::conditions, &C::Conditions::enabled,
        cv::OneOf<EventsPolicy>{{{"auto", EventsPolicy::kAuto}, {"true", EventsPolicy::kOn},
                                 {"false", EventsPolicy::kOff}}}),
    key("conditions.grace", &C::conditions, &C::Conditions::grace, cv::Period{D{0}, D{3600000}}),
    key("conditions.readiness_gate", &C::conditions, &C::Conditions::readiness_gate, cv::Flag{}),
    key("conditions.resync", &C::conditions, &C::Conditions::resync, cv::Period{D{1000}, D{86400000}}),
    key("daemon.event_loop_fifo_priority", &C::daemon, &C::Daemon::event_loop_fifo_priority, cv::ZeroOrCount{1, 99}),
    key("daemon.event_loop_slice_us", &C::daemon, &C::Daemon::event_loop_slice_us,
        cv::ZeroOrCount{100, 100000}),  // EEVDF clamps a slice to 100 us .. 100 ms; 0: its default
    key("daemon.grant_handover_us", &C::daemon, &C::Daemon::grant_handover_us, cv::ZeroOrCount{1, 1000}),
    key("daemon.program_query_interval", &C::daemon, &C::Daemon::program_query_interval, cv::Period{D{100}, D{3600000}}),
    key("daemon.resync_interval", &C::daemon, &C::Daemon::resync_interval, cv::Period{D{1000}, D{86400000}}),
    key("devices.control", &C::devices, &C::Devices::control, cv::NodeNames{}),
    key("devices.dev_root", &C::devices, &C::Devices::dev_root, cv::AbsolutePath{}),
    key("devices.dra_drivers", &C::devices, &C::Devices::dra_drivers, cv::Texts{}),
    key("devices.env_visible", &C::devices, &C::Devices::env_visible,
        cv::OneOf<EnvVisiblePolicy>{{{"report", EnvVisiblePolicy::kReport}, {"restore", EnvVisiblePolicy::kRestore}}}),
    key("devices.mig_map", &C::devices, &C::Devices::mig_map, cv::MigMap{}),
    key("devices.nvml_library", &C::devices, &C::Devices::nvml_library, cv::Text{}),
    key("devices.nvml_timeout", &C::devices, &C::Devices::nvml_timeout, cv::Period{D{100}, D{600000}}),
    key("devices.proc_root", &C::devices, &C::Devices::proc_root, cv::AbsolutePath{}),
    key("devices.resources", &C::devices, &C::Devices::resources,
        cv::NonEmptyTexts{"must list at least one resource name or glob"}),
    key("events.enabled", &C::events, &C::Events::enabled,
        cv::OneOf<EventsPolicy>{{{"auto", EventsPolicy::kAuto}, {"true", EventsPolicy::kOn},
                                 {"false", EventsPolicy::kOff}}}),
    key("events.pod_writes_per_minute", &C::events, &C::Events::pod_writes_per_minute, cv::Count{1, 600}),
    key("kubelet.checkpoint", &C::kubelet, &C::Kubelet::checkpoint, cv::AbsolutePath{}),
    key("kubelet.device_plugins_dir", &C::kubelet, &C::Kubelet::device_plugins_dir, cv::AbsolutePath{}),
    key("kubelet.on_invalid_checksum", &C::kubelet, &C::Kubelet::on_invalid_checksum,
        cv::OneOf<InvalidChecksumPolicy>{{{"use", InvalidChecksumPolicy::kUse},
                                          {"ignore", InvalidChecksumPolicy::kIgnore}}}),
    key("kubelet.plugin_probe_interval", &C::kubelet, &C::Kubelet::plugin_probe_interval, cv::Period{D{1000}, D{3600000}}),
    key("kubelet.plugin_probe_timeout", &C::kubelet, &C::Kubelet::plugin_probe_timeout, cv::Period{D{10}, D{60000}}),
    key("kubelet.pod_resources_interval", &C::kubelet, &C::Kubelet::pod_resources_interval, cv::Period{D{100}, D{3600000}}),
    key("kubelet.pod_resources_socket", &C::kubelet, &C::Kubelet::pod_resources_socket, cv::AbsolutePath{}),
    key("kubelet.pod_resources_timeout", &C::kubelet, &C::Kubelet::pod_resources_timeout, cv::Period{D{10}, D{60000}}),
    key("kubelet.remediate_stale_checkpoint", &C::kubelet, &C::Kubelet::remediate_stale_checkpoint, cv::Flag{}),
    key("kubelet.root_dir", &C::kubelet, &C::Kubelet::root_dir, cv::AbsolutePath{}),
    key("kubelet.source", &C::kubelet, &C::Kubelet::source,
        cv::OneOf<AllocationSource>{{{"auto", AllocationSource::kAuto}, {"checkpoint", AllocationSource::kCheckpoint},
                                     {"pod-resources", AllocationSource::kPodResources}}}),
    key("kubelet.stale_confirm_after", &C::kubelet, &C::Kubelet::stale_confirm_after, cv::Period{D{100}, D{86400000}}),
    key("kubelet.unit", &C::kubelet, &C::Kubelet::unit, cv::NonEmptyText{"must name a systemd unit"}),
    key("kubernetes.api_server", &C::kubernetes, &C::Kubernetes::api_server, cv::HttpsUrlOrEmpty{}),
    key("kubernetes.ca_file", &C::kubernetes, &C::Kubernetes::ca_file, cv::AbsolutePath{}),
    key("kubernetes.token_file", &C::kubernetes, &C::Kubernetes::token_file, cv::AbsolutePath{}),
    key("log.level", &C::log, &C::Log::level, cv::OneOfWords{{"trace", "debug", "info", "warn", "error"}}),
    key("metrics.health_stale_after", &C::metrics, &C::Metrics::health_stale_after, cv::Period{D{1000}, D{3600000}}),
    key("metrics.listen", &C::metrics, &C::Metrics::listen, cv::ListenAddress{}),
    key("metrics.web_config", &C::metrics, &C::Metrics::web_config, cv::OptionalAbsolutePath{}),
    key("mode", &C::mode, cv::OneOf<Mode>{{{"enforce", Mode::kEnforce}, {"observe", Mode::kObserve}}}),
    key("probe.attach_hook", &C::probe, &C::Probe::attach_hook, cv::Flag{}),
    key("probe.enabled", &C::probe, &C::Probe::enabled, cv::Flag{}),
    key("probe.syscall_hook", &C::probe, &C::Probe::syscall_hook,
        cv::OneOf<SyscallHookPolicy>{{{"auto", SyscallHookPolicy::kAuto}, {"always", SyscallHookPolicy::kAlways},
                                      {"on-drift", SyscallHookPolicy::kOnDrift}, {"off", SyscallHookPolicy::kOff}}}),
    key("probe.syscall_hook_linger", &C::probe, &C::Probe::syscall_hook_linger, cv::Period{D{0}, D{86400000}}),
    key("repair.apply_quiet", &C::repair, &C::Repair::apply_quiet, cv::Period{D{1}, D{1000}}),
    key("repair.apply_wait_limit", &C::repair, &C::Repair::apply_wait_limit, cv::Period{D{0}, D{60000}}),
    key("repair.burst", &C::repair, &C::Repair::burst, cv::Count{1, 1000000}),
    key("repair.log_burst", &C::repair, &C::Repair::log_burst, cv::Count{1, 10000}),
    key("repair.log_interval", &C::repair, &C::Repair::log_interval, cv::Period{D{100}, D{3600000}}),
    key("repair.max_per_minute", &C::repair, &C::Repair::max_per_minute, cv::Count{1, 600000}),
    key("repair.rejected_backoff", &C::repair, &C::Repair::rejected_backoff, cv::Period{D{100}, D{3600000}}),
    // A cgroup v2 repair no longer rebuilds the runtime's device list from a guess of its
    // built-in devices: it adds the wanted devices to the programs in force.
    removed("runtime.builtin_devices",
            "was removed: cgroup v2 repairs now keep each runtime's own device list and only add the "
            "allocated devices; delete this key"),
    key("runtime.state_dirs", &C::runtime, &C::Runtime::state_dirs, cv::AbsolutePaths{}),
    key("systemd.bus_address", &C::systemd, &C::Systemd::bus_address, cv::Text{}),
    key("systemd.timeout", &C::systemd, &C::Systemd::timeout, cv::Period{D{10}, D{60000}}),
    key("systemd.unit_dirs", &C::systemd, &C::Systemd::unit_dirs, cv::AbsolutePaths{}),
};

const ConfigKey* find_key(std::string_view name) {
  for (const auto& k : kKeys)
    if (k.name == name) return &k;
  return nullptr;
}

bool is_section(const std::string& path) {
  for (const auto& k : kKeys)
    if (k.name.size() > path.size() && k.name.substr(0, path.size() + 1) == path + ".") return true;
  return false;
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
    if (const ConfigKey* k = find_key(path)) {
      const YAML::Node& value = kv.second;
      // A key with no value has no line of its own: point at the key.
      const YAML::Node& where = value.IsNull() ? kv.first : value;
      if (auto problem = k->read(value, config)) return Error{at(where) + path + ": " + *problem};
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
  for (const auto& k : kKeys) keys.emplace_back(k.name);
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
