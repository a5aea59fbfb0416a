#include "kube/conditions.h"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <set>

#include "core/config.h"
#include "kube/api_names.h"
#include "kube/pod_gates.h"

namespace gdw::kube {
namespace {

using json = nlohmann::json;

// The condition's message names this many pods or sockets, then counts the rest.
constexpr std::size_t kNamed = 5;
// Each name in a message (tenant-influenced: a pod's or a container's name) is cut here.
constexpr std::size_t kMaxNameInMessage = 253;

std::string cut(const std::string& s) {
  std::string out;
  for (unsigned char ch : s.substr(0, kMaxNameInMessage)) out += (ch < 0x20 || ch == 0x7f) ? ' ' : char(ch);
  return out;
}

// "a, b, c (and 4 more)"
std::string named(const std::vector<std::string>& sorted_items) {
  std::string s;
  for (std::size_t i = 0; i < sorted_items.size() && i < kNamed; ++i) s += (i ? ", " : "") + sorted_items[i];
  if (sorted_items.size() > kNamed) s += " (and " + std::to_string(sorted_items.size() - kNamed) + " more)";
  return s;
}

std::string grace_text(Clock::duration grace) {
  return format_duration(std::chrono::duration_cast<Duration>(grace));
}

// Counts only: anyone who can read nodes reads this, and pod names are other tenants'.
// Each pod's own Events and gate name its containers.
ConditionState degraded(const ProblemClock& clock, Clock::time_point now, Clock::duration grace) {
  std::set<std::string> pods;
  std::size_t containers = 0;
  for (const auto* p : clock.lasting(now, grace)) {
    pods.insert(p->pod.uid);
    ++containers;
  }
  if (pods.empty()) return {false, "GPUDeviceAccessOK", "Every GPU container holds its allocated devices", {}};
  return {true, "ContainersMissingDevices",
          std::to_string(containers) + " container(s) in " + std::to_string(pods.size()) +
              " pod(s) without their allocated GPU devices for more than " + grace_text(grace) +
              " (the pods' own Events name them)",
          {}};
}

ConditionState stale(bool is_stale) {
  if (!is_stale) return {false, "CheckpointFresh", "The kubelet checkpoint describes this node's GPUs", {}};
  return {true, "CheckpointStale",
          "The kubelet checkpoint names GPUs this node does not have or another boot's (GPU UUIDs changed at a reboot)",
          {}};
}

ConditionState plugins(std::vector<std::string> sockets) {
  if (sockets.empty()) return {false, "DevicePluginsResponsive", "Every device plugin answers", {}};
  for (auto& s : sockets) s = cut(s);
  std::sort(sockets.begin(), sockets.end());
  sockets.erase(std::unique(sockets.begin(), sockets.end()), sockets.end());
  return {true, "DevicePluginHung",
          "Device plugin socket(s) not answering GetDevicePluginOptions: " + named(sockets) +
              " (kubelet admits no pod needing them)",
          {}};
}

json condition_json(const char* type, const ConditionState& c) {
  return {{"type", type},
          {"status", c.status ? "True" : "False"},
          {"reason", c.reason},
          {"message", c.message},
          {"lastTransitionTime", rfc3339(c.last_transition)}};
}

}  // namespace

void ProblemClock::observe(const DeviceAccessState& state, Clock::time_point now) {
  std::map<std::string, Clock::time_point> since;
  for (const auto& p : state.problems) {
    auto before = since_.find(p.key);
    since.emplace(p.key, before == since_.end() ? now : before->second);
  }
  since_ = std::move(since);
  state_ = state;
}

std::vector<const ContainerProblem*> ProblemClock::lasting(Clock::time_point now, Clock::duration grace) const {
  std::vector<const ContainerProblem*> out;
  for (const auto& p : state_.problems) {
    auto s = since_.find(p.key);
    if (s != since_.end() && now - s->second >= grace) out.push_back(&p);
  }
  return out;
}

std::optional<Clock::time_point> ProblemClock::next_expiry(Clock::time_point now, Clock::duration grace) const {
  std::optional<Clock::time_point> next;
  for (const auto& [key, since] : since_) {
    const auto at = since + grace;
    if (at > now && (!next || at < *next)) next = at;
  }
  return next;
}

void ProblemClock::backdate(const std::string& pod_uid, Clock::time_point since) {
  for (const auto& p : state_.problems) {
    if (!pod_uid.empty() && p.pod.uid != pod_uid) continue;
    auto it = since_.find(p.key);
    if (it != since_.end() && since < it->second) it->second = since;
  }
}

const char* condition_type_name(NodeConditionType type) {
  switch (type) {
    case NodeConditionType::kDeviceAccessDegraded: return "GPUDeviceAccessDegraded";
    case NodeConditionType::kAllocationRecordStale: return "GPUAllocationRecordStale";
    case NodeConditionType::kDevicePluginUnresponsive: return "GPUDevicePluginUnresponsive";
  }
  return "";
}

NodeConditions judge_node(const ProblemClock& clock, Clock::time_point now, Clock::duration grace) {
  return {degraded(clock, now, grace), stale(clock.state().checkpoint_stale),
          plugins(clock.state().unresponsive_plugins)};
}

bool gate_ready(const ProblemClock& clock, const std::string& pod_uid, Clock::time_point now, Clock::duration grace) {
  for (const auto* p : clock.lasting(now, grace))
    if (p->pod.uid == pod_uid) return false;
  return true;
}

ConditionState gate_condition(const ProblemClock& clock, const std::string& pod_uid, bool ready, Clock::time_point now,
                              Clock::duration grace) {
  if (ready) return {true, "GPUDevicesReady", "Every GPU container of the pod holds its allocated devices", {}};
  std::set<std::string> containers;
  for (const auto* p : clock.lasting(now, grace))
    if (p->pod.uid == pod_uid) containers.insert(p->container.empty() ? "(unidentified)" : cut(p->container));
  return {false, "GPUDevicesMissing",
          "Container(s) without their allocated GPU devices for more than " + grace_text(grace) + ": " +
              named({containers.begin(), containers.end()}),
          {}};
}

GateVerdict judge_gate(const ProblemClock& clock, const std::string& pod_uid, bool started, bool checked,
                       Clock::time_point now, Clock::duration grace) {
  if (!gate_ready(clock, pod_uid, now, grace)) return {gate_condition(clock, pod_uid, false, now, grace), true};
  if (!started)
    return {{false, "ContainersNotStarted", "Not every container of the pod has started yet", {}}, false};
  bool unidentified = false;
  for (const auto& p : clock.state().problems)
    unidentified |= p.pod.uid == pod_uid && p.kind == ContainerProblem::Kind::kUnidentified;
  if (!checked || unidentified)
    return {{false, "NotYetChecked", "gpu-devwatch has not yet checked every GPU container of the pod", {}}, false};
  return {gate_condition(clock, pod_uid, true, now, grace), false};
}

ConditionState with_transition(ConditionState current, const std::optional<ConditionState>& before,
                               WallClock::time_point at) {
  current.last_transition = before && before->status == current.status ? before->last_transition : at;
  return current;
}

std::string node_status_patch(const NodeConditions& conditions, WallClock::time_point heartbeat) {
  json list = json::array();
  for (std::size_t i = 0; i < conditions.size(); ++i) {
    json c = condition_json(condition_type_name(static_cast<NodeConditionType>(i)), conditions[i]);
    c["lastHeartbeatTime"] = rfc3339(heartbeat);
    list.push_back(std::move(c));
  }
  return json{{"status", {{"conditions", std::move(list)}}}}.dump();
}

std::string node_status_path(const std::string& node) {
  return dns_subdomain(node) ? "/api/v1/nodes/" + node + "/status" : "";
}

std::string pod_status_patch(const PodRef& pod, const ConditionState& gate, WallClock::time_point probe) {
  json condition = condition_json(std::string(kReadinessGate).c_str(), gate);
  condition["lastProbeTime"] = rfc3339(probe);
  return json{{"metadata", {{"uid", pod.uid}}}, {"status", {{"conditions", json::array({std::move(condition)})}}}}
      .dump();
}

std::string pod_status_path(const PodRef& pod) {
  return "/api/v1/namespaces/" + pod.pod_namespace + "/pods/" + pod.name + "/status";
}

}  // namespace gdw::kube
