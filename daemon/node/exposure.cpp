#include "node/exposure.h"

#include <dirent.h>
#include <fnmatch.h>
#include <unistd.h>

#include <algorithm>
#include <charconv>
#include <map>

#include "backend/device_programs_v2.h"
#include "node/node_model.h"

namespace gdw {
namespace {

constexpr std::size_t kMaxUnitFile = 1 << 20;
constexpr std::size_t kMaxDropIns = 256;

std::string_view trim(std::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t' || s.front() == '\r')) s.remove_prefix(1);
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t' || s.back() == '\r')) s.remove_suffix(1);
  return s;
}

// "195:0" → (195, 0).
std::optional<std::pair<std::uint32_t, std::uint32_t>> parse_major_minor(std::string_view s) {
  const auto colon = s.find(':');
  if (colon == std::string_view::npos) return std::nullopt;
  std::uint32_t major = 0, minor = 0;
  auto a = std::from_chars(s.data(), s.data() + colon, major);
  auto b = std::from_chars(s.data() + colon + 1, s.data() + s.size(), minor);
  if (a.ec != std::errc() || a.ptr != s.data() + colon || b.ec != std::errc() || b.ptr != s.data() + s.size())
    return std::nullopt;
  return std::make_pair(major, minor);
}

bool entry_matches(const DeviceAllowEntry& e, const Inventory& inventory, const DeviceNumber& dev) {
  const std::string& d = e.device;
  for (auto [prefix, type] : {std::pair{"/dev/char/", DeviceType::kChar}, {"/dev/block/", DeviceType::kBlock}}) {
    const std::string_view p = prefix;
    if (d.rfind(p, 0) != 0) continue;
    auto mm = parse_major_minor(std::string_view(d).substr(p.size()));
    return mm && dev.type == type && dev.major == mm->first && dev.minor == mm->second;
  }
  if (d.rfind("char-", 0) == 0) {
    // Block-device names are not in the inventory: only char-<glob> is matched.
    if (dev.type != DeviceType::kChar) return false;
    const std::string glob = d.substr(5);
    for (const auto& [name, major] : inventory.char_majors)
      if (major == dev.major && ::fnmatch(glob.c_str(), name.c_str(), 0) == 0) return true;
    return false;
  }
  if (d.rfind("/dev/", 0) == 0) {
    auto it = inventory.dev_nodes.find(d.substr(5));
    return it != inventory.dev_nodes.end() && it->second == dev;
  }
  return false;
}

}  // namespace

void apply_unit_text(std::string_view text, ScopeDeviceAllow& into) {
  while (!text.empty()) {
    const auto nl = text.find('\n');
    std::string_view line = trim(text.substr(0, nl));
    text = nl == std::string_view::npos ? std::string_view() : text.substr(nl + 1);
    const auto eq = line.find('=');
    if (eq == std::string_view::npos || line.empty() || line[0] == '#' || line[0] == ';') continue;
    const std::string_view key = trim(line.substr(0, eq));
    const std::string_view value = trim(line.substr(eq + 1));
    if (key == "DevicePolicy") {
      into.device_policy = std::string(value);
    } else if (key == "DeviceAllow") {
      if (value.empty()) {
        into.entries.clear();
        continue;
      }
      const auto space = value.find_first_of(" \t");
      DeviceAllowEntry entry;
      entry.device = std::string(value.substr(0, space));
      const std::string_view access = space == std::string_view::npos ? std::string_view() : trim(value.substr(space));
      if (!access.empty()) {
        auto parsed = parse_access(access);
        if (!parsed) continue;  // systemd ignores such a line too
        entry.access = *parsed;
      }
      into.entries.push_back(std::move(entry));
    }
  }
}

bool scope_restricts_devices(const ScopeDeviceAllow& scope) {
  return scope.device_policy != "auto" || !scope.entries.empty();
}

bool device_allow_allows(const ScopeDeviceAllow& scope, const Inventory& inventory, const DeviceNumber& dev,
                         std::uint8_t access) {
  if (!scope_restricts_devices(scope)) return true;
  std::uint8_t granted = 0;
  for (const auto& e : scope.entries)
    if (entry_matches(e, inventory, dev)) granted |= e.access;
  return (access & ~granted) == 0;
}

Result<ScopeDeviceAllow> read_scope_device_allow(const std::vector<std::string>& unit_dirs, const std::string& unit) {
  if (unit.empty() || unit.find('/') != std::string::npos) return Error{"no scope unit"};
  ScopeDeviceAllow scope;
  std::optional<std::string> main_file;
  std::map<std::string, std::string> drop_ins;  // name → path; the first directory wins
  for (const auto& dir : unit_dirs) {
    const std::string path = dir + "/" + unit;
    if (!main_file && ::access(path.c_str(), F_OK) == 0) main_file = path;
    DIR* d = ::opendir((path + ".d").c_str());
    if (!d) continue;
    while (dirent* ent = ::readdir(d)) {
      const std::string name = ent->d_name;
      if (name.size() < 6 || name.compare(name.size() - 5, 5, ".conf") != 0) continue;
      if (drop_ins.size() >= kMaxDropIns) break;
      drop_ins.try_emplace(name, path + ".d/" + name);
    }
    ::closedir(d);
  }
  if (!main_file && drop_ins.empty())
    return Error{"no unit file for " + unit + " under " + (unit_dirs.empty() ? std::string("(none)") : unit_dirs[0])};
  std::vector<std::string> files;
  if (main_file) files.push_back(*main_file);
  for (const auto& [name, path] : drop_ins) files.push_back(path);
  for (const auto& path : files) {
    auto text = read_text_file(path, kMaxUnitFile);
    if (!text) return text.error();
    apply_unit_text(*text, scope);
    scope.files.push_back(path);
  }
  return scope;
}

Exposure compute_exposure(const std::vector<WantedDevice>& wanted, const std::vector<OciDeviceCgroupRule>& spec_rules,
                          const ScopeDeviceAllow* device_allow, const Inventory& inventory,
                          const std::string& scope_problem) {
  Exposure out;
  out.device_allow_checked = device_allow != nullptr;
  out.device_allow_problem = scope_problem;
  for (const auto& w : wanted) {
    ExposedDevice d{w, !oci_rules_allow(spec_rules, w.dev, w.access), false};
    if (device_allow) d.device_allow = !device_allow_allows(*device_allow, inventory, w.dev, w.access);
    if (d.spec || d.device_allow) out.exposed.push_back(std::move(d));
  }
  return out;
}

std::string exposure_reason(const ExposedDevice& d) {
  if (d.spec && d.device_allow) return "spec+DeviceAllow";
  return d.spec ? "spec" : "DeviceAllow";
}

std::optional<std::vector<WantedDevice>> device_allow_lacks(const Exposure& exposure) {
  if (!exposure.device_allow_checked) return std::nullopt;
  std::vector<WantedDevice> lacking;
  for (const auto& e : exposure.exposed)
    if (e.device_allow) lacking.push_back(e.device);
  return lacking;
}

}  // namespace gdw
