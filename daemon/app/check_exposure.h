// `check`'s report of exposure (node/exposure.h) and of env-only GPUs (core/env_visible.h),
// as text and JSON.
#pragma once

#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "node/container_target.h"

namespace gdw {

// "ns/pod/container" or the cgroup's pod UID and container ID.
std::string check_who(const ContainerTarget& t);

// GPU containers' exposed devices, one line each, and a total; nothing when none is exposed.
void print_exposure_text(const std::vector<const ContainerTarget*>& gpu_targets);
// Per container: {"exposed": [...], "device_allow": {...}}, merged into its JSON object.
void add_exposure_json(const ContainerTarget& t, nlohmann::ordered_json& container);

// Containers whose NVIDIA_VISIBLE_DEVICES names GPUs without an allocation.
void print_env_visible_text(const std::vector<const ContainerTarget*>& env_targets);
nlohmann::ordered_json env_visible_json(const std::vector<const ContainerTarget*>& env_targets);

}  // namespace gdw
