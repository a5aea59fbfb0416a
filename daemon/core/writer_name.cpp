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

// The kernel keeps a comm of at most 15 bytes (TASK_COMM_LEN - 1): nvidia-container-cli's
// and nvidia-container-runtime-hook's are both "nvidia-containe". A comm cut there matches
// a longer prefix's first 15 bytes. (The waits go by comms alone: the executable is read
// after the grant.)
constexpr std::size_t kCommMax = 15;

std::string_view match(std::string_view name, bool comm) {
  for (auto [prefix, label] : kKnown) {
    if (comm && name.size() == kCommMax && prefix.size() > kCommMax) prefix = prefix.substr(0, kCommMax);
    if (starts_with(name, prefix)) return label;
  }
  return {};
}

}  // namespace

std::string recognise_writer(const WriterIdentity& w) {
  if (w.pid == 1) return "systemd";  // PID 1 re-applying DeviceAllow= on daemon-reload
  if (auto label = match(w.comm, /*comm=*/true); !label.empty()) return std::string(label);
  if (auto label = match(base_name(w.exe), /*comm=*/false); !label.empty()) return std::string(label);
  // A runtime's helper (e.g. runc's child before it renames itself) with a known parent.
  if (auto label = match(w.parent_comm, /*comm=*/true); label == "containerd-shim" || label == "cri-o") return "runc";
  return "other";
}

}  // namespace gdw
