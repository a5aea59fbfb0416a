// The node's own conditions as the API server has them when the daemon starts (GET
// /api/v1/nodes/<node>): what a restart must not contradict before it has checked, and the
// transition time a condition that stays "True" keeps. Pure: strings in, values out.
#pragma once

#include <array>
#include <optional>
#include <string>
#include <string_view>

#include "core/result.h"
#include "kube/conditions.h"

namespace gdw::kube {

// One of our condition types on the node.
struct PriorCondition {
  std::string status;  // "True", "False" or "Unknown" (anything else reads as "Unknown")
  std::string reason;
  std::string message;
  std::optional<WallClock::time_point> last_transition;
};
// By NodeConditionType; nullopt: the node does not have that condition.
using PriorConditions = std::array<std::optional<PriorCondition>, kNodeConditionCount>;

// Our three conditions in a Node object's JSON; an error when it is not a Node.
Result<PriorConditions> parse_node_conditions(std::string_view node_json);

// "2024-05-01T12:00:00Z" (fractions and a numeric offset accepted); nullopt when not that.
std::optional<WallClock::time_point> parse_rfc3339(std::string_view text);

// The prior condition as a verdict to carry a transition time from: nullopt unless it is
// "True" or "False".
std::optional<ConditionState> prior_state(const std::optional<PriorCondition>& prior);

// The strategic-merge patch that says "Unknown" (reason NotYetChecked) for each of our
// conditions the node does not have; empty when it has them all.
std::string node_unknown_patch(const PriorConditions& prior, WallClock::time_point now);

}  // namespace gdw::kube
