#include "kube/node_prior.h"

#include <nlohmann/json.hpp>

#include <cstdio>
#include <ctime>

namespace gdw::kube {
namespace {

using json = nlohmann::json;

// A reason or message read back is cut here (ours are far shorter).
constexpr std::size_t kMaxText = 1024;

std::string text_of(const json& c, const char* key) {
  auto it = c.find(key);
  if (it == c.end() || !it->is_string()) return "";
  return it->get<std::string>().substr(0, kMaxText);
}

}  // namespace

std::optional<WallClock::time_point> parse_rfc3339(std::string_view text) {
  if (text.size() < 20 || text.size() > 40) return std::nullopt;
  const std::string s(text);
  int y = 0, mo = 0, d = 0, h = 0, mi = 0, sec = 0, used = 0;
  if (std::sscanf(s.c_str(), "%4d-%2d-%2dT%2d:%2d:%2d%n", &y, &mo, &d, &h, &mi, &sec, &used) != 6 || used != 19)
    return std::nullopt;
  std::size_t i = 19;
  if (i < s.size() && s[i] == '.') {
    ++i;
    while (i < s.size() && s[i] >= '0' && s[i] <= '9') ++i;
  }
  long offset = 0;
  if (i < s.size() && (s[i] == 'Z' || s[i] == 'z') && i + 1 == s.size()) {
    offset = 0;
  } else if (i + 6 == s.size() && (s[i] == '+' || s[i] == '-') && s[i + 3] == ':') {
    int oh = 0, om = 0;
    if (std::sscanf(s.c_str() + i + 1, "%2d:%2d", &oh, &om) != 2) return std::nullopt;
    offset = (s[i] == '+' ? 1 : -1) * (oh * 3600L + om * 60L);
  } else {
    return std::nullopt;
  }
  if (mo < 1 || mo > 12 || d < 1 || d > 31 || h > 23 || mi > 59 || sec > 60) return std::nullopt;
  std::tm tm{};
  tm.tm_year = y - 1900;
  tm.tm_mon = mo - 1;
  tm.tm_mday = d;
  tm.tm_hour = h;
  tm.tm_min = mi;
  tm.tm_sec = sec;
  const time_t t = ::timegm(&tm);
  return WallClock::from_time_t(t - offset);
}

Result<PriorConditions> parse_node_conditions(std::string_view node_json) {
  auto node = json::parse(node_json, nullptr, false);
  if (!node.is_object() || node.value("kind", "") != "Node") return Error{"the answer is not a Node object"};
  PriorConditions prior{};
  auto status = node.find("status");
  if (status == node.end() || !status->is_object()) return prior;
  auto conditions = status->find("conditions");
  if (conditions == status->end() || !conditions->is_array()) return prior;
  for (const auto& c : *conditions) {
    if (!c.is_object()) continue;
    const std::string type = text_of(c, "type");
    for (std::size_t i = 0; i < kNodeConditionCount; ++i) {
      if (type != condition_type_name(static_cast<NodeConditionType>(i))) continue;
      PriorCondition p{text_of(c, "status"), text_of(c, "reason"), text_of(c, "message"),
                       parse_rfc3339(text_of(c, "lastTransitionTime"))};
      if (p.status != "True" && p.status != "False") p.status = "Unknown";
      prior[i] = std::move(p);
    }
  }
  return prior;
}

std::optional<ConditionState> prior_state(const std::optional<PriorCondition>& prior) {
  if (!prior || prior->status == "Unknown") return std::nullopt;
  return ConditionState{prior->status == "True", prior->reason, prior->message,
                        prior->last_transition.value_or(WallClock::time_point{})};
}

std::string node_unknown_patch(const PriorConditions& prior, WallClock::time_point now) {
  json list = json::array();
  for (std::size_t i = 0; i < prior.size(); ++i) {
    if (prior[i]) continue;
    list.push_back({{"type", condition_type_name(static_cast<NodeConditionType>(i))},
                    {"status", "Unknown"},
                    {"reason", "NotYetChecked"},
                    {"message", "gpu-devwatch has not finished its first check of this node"},
                    {"lastTransitionTime", rfc3339(now)},
                    {"lastHeartbeatTime", rfc3339(now)}});
  }
  if (list.empty()) return "";
  return json{{"status", {{"conditions", std::move(list)}}}}.dump();
}

}  // namespace gdw::kube
