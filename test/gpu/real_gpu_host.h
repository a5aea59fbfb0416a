// What the real-GPU tests need to know about the machine they run on, read from the host
// itself (never assumed): the first GPU's UUID and device minor from
// /proc/driver/nvidia/gpus/*/information, the majors from /proc/devices (nvidia-uvm's is
// dynamic), which control nodes exist under /dev, and where the cgroup2 hierarchy is
// (/sys/fs/cgroup on a pure v2 host, /sys/fs/cgroup/unified on a hybrid one). The parsers
// take strings; find_real_gpu() reads. Independent of the daemon's own inventory code, so
// that the test does not share its mistakes.
#pragma once

#include <glob.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <unistd.h>

#include <cstdint>
#include <map>
#include <optional>
#include <sstream>
#include <string>
#include <vector>

#include "support/temp_dir.h"

namespace gdw::test {

// `Key:   value` lines of a GPU's information file, split at the first ':'.
inline std::map<std::string, std::string> parse_information(const std::string& text) {
  std::map<std::string, std::string> fields;
  std::istringstream lines(text);
  for (std::string line; std::getline(lines, line);) {
    const auto colon = line.find(':');
    if (colon == std::string::npos) continue;
    auto trim = [](std::string s) {
      const auto b = s.find_first_not_of(" \t"), e = s.find_last_not_of(" \t\r");
      return b == std::string::npos ? std::string() : s.substr(b, e - b + 1);
    };
    fields[trim(line.substr(0, colon))] = trim(line.substr(colon + 1));
  }
  return fields;
}

// The `Character devices:` section of /proc/devices: name -> major (the first line of a name).
inline std::map<std::string, std::uint32_t> parse_char_majors(const std::string& text) {
  std::map<std::string, std::uint32_t> majors;
  std::istringstream lines(text);
  bool chars = false;
  for (std::string line; std::getline(lines, line);) {
    if (line.rfind("Character devices:", 0) == 0) chars = true;
    else if (line.rfind("Block devices:", 0) == 0) chars = false;
    std::istringstream fields(line);
    std::uint32_t major;
    std::string name;
    if (chars && fields >> major >> name) majors.emplace(name, major);
  }
  return majors;
}

struct DevNode {
  std::string path;  // /dev/nvidia0
  std::uint32_t major = 0, minor = 0;
};

struct RealGpu {
  std::string uuid;         // GPU-…
  DevNode gpu;              // /dev/nvidia<minor>
  std::vector<DevNode> control;  // the control nodes that exist: nvidiactl, nvidia-uvm, …
  std::string cgroup2_parent, cgroup2_name;  // CgroupSandbox's cgroup_root and hierarchy
  std::string why_not;      // non-empty: no usable GPU here, and why
};

// The first GPU, its control nodes and the cgroup2 hierarchy; why_not says what is missing.
inline RealGpu find_real_gpu() {
  RealGpu g;
  auto none = [&g](std::string why) {
    g.why_not = std::move(why);
    return g;
  };
  glob_t found{};
  const bool any = ::glob("/proc/driver/nvidia/gpus/*/information", 0, nullptr, &found) == 0 && found.gl_pathc > 0;
  const std::string info_path = any ? found.gl_pathv[0] : "";
  ::globfree(&found);
  if (!any) return none("no NVIDIA driver (/proc/driver/nvidia/gpus/*/information)");
  auto info = parse_information(read_file(info_path));
  const auto majors = parse_char_majors(read_file("/proc/devices"));
  auto major_of = [&](std::initializer_list<const char*> names) -> std::optional<std::uint32_t> {
    for (const char* n : names)
      if (auto it = majors.find(n); it != majors.end()) return it->second;
    return std::nullopt;
  };
  const auto nvidia = major_of({"nvidia", "nvidia-frontend"});
  if (info["GPU UUID"].rfind("GPU-", 0) != 0 || info["Device Minor"].empty() || !nvidia)
    return none("cannot read the GPU's UUID and minor from " + info_path + " and /proc/devices");
  g.uuid = info["GPU UUID"];
  const auto gpu_minor = static_cast<std::uint32_t>(std::stoul(info["Device Minor"]));
  g.gpu = {"/dev/nvidia" + std::to_string(gpu_minor), *nvidia, gpu_minor};
  if (::access(g.gpu.path.c_str(), F_OK) != 0) return none(g.gpu.path + " does not exist");
  // What libnvidia-container gives a compute container besides its GPUs (nvidia-modeset
  // only with the display capability), where the node exists.
  const auto ctl = major_of({"nvidiactl", "nvidia", "nvidia-frontend"});
  const auto uvm = major_of({"nvidia-uvm"});
  const std::vector<std::pair<std::optional<std::uint32_t>, DevNode>> candidates = {
      {ctl, {"/dev/nvidiactl", ctl.value_or(0), 255}},
      {uvm, {"/dev/nvidia-uvm", uvm.value_or(0), 0}},
      {uvm, {"/dev/nvidia-uvm-tools", uvm.value_or(0), 1}}};
  for (const auto& [known, node] : candidates)
    if (known && ::access(node.path.c_str(), F_OK) == 0) g.control.push_back(node);
  if (::access("/sys/fs/cgroup/cgroup.controllers", F_OK) == 0) {
    g.cgroup2_parent = "/sys/fs";
    g.cgroup2_name = "cgroup";
  } else if (::access("/sys/fs/cgroup/unified/cgroup.controllers", F_OK) == 0) {
    g.cgroup2_parent = "/sys/fs/cgroup";
    g.cgroup2_name = "unified";
  } else {
    return none("no cgroup2 hierarchy at /sys/fs/cgroup or /sys/fs/cgroup/unified");
  }
  return g;
}

// st_rdev of a node as "major:minor"; "" when it does not exist.
inline std::string rdev_of(const std::string& path) {
  struct stat st{};
  if (::stat(path.c_str(), &st) != 0) return "";
  return std::to_string(major(st.st_rdev)) + ":" + std::to_string(minor(st.st_rdev));
}

}  // namespace gdw::test
