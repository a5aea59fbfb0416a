#include "core/writer_name.h"

#include <array>
#include <string_view>
#include <utility>

namespace gdw {
namespace {

std::string_view base_name(std::string_view path) {
  auto slash = path.rfind('/');
  return slash == std::string_view::npos ? path : path.substr(slash + 1);
}

bool starts_with(std::string_view s, std::string_view prefix) { return s.substr(0, prefix.size()) == prefix; }

// Prefixes of comm or executable names, first match wins. runc renames its children
// ("runc:[1:CHILD]", "runc:[2:INIT]"); the shims are "containerd-shim-runc-v2" and older.
constexpr std::array<std::pair<std::string_view, std::string_view>, 11> kKnown = {{
    {"runc", "runc"},
    {"crun", "crun"},
    {"containerd-shim", "containerd-shim"},
    {"containerd", "containerd"},
    {"crio", "cri-o"},
    {"conmon", "cri-o"},
    {"systemd", "systemd"},
    {"kubelet", "kubelet"},
    {"nvidia-container", "nvidia-container-toolkit"},
    {"nvidia-ctk", "nvidia-container-toolkit"},
    {"gpu-devwatch", "gpu-devwatch"},
}};

std::string_view match(std::string_view name) {
  for (const auto& [prefix, label] : kKnown)
    if (starts_with(name, prefix)) return label;
  return {};
}

}  // namespace

std::string recognise_writer(const WriterIdentity& w) {
  if (w.pid == 1) return "systemd";  // PID 1 re-applying DeviceAllow= on daemon-reload
  for (std::string_view name : {std::string_view(w.comm), base_name(w.exe)}) {
    if (auto label = match(name); !label.empty()) return std::string(label);
  }
  // A runtime's helper (e.g. runc's child before it renames itself) with a known parent.
  if (auto label = match(w.parent_comm); label == "containerd-shim" || label == "cri-o") return "runc";
  return "other";
}

}  // namespace gdw
