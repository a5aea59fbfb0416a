#include "support/metrics_text.h"

#include <sstream>

namespace gdw::test {
namespace {

std::map<std::string, std::string> parse_labels(const std::string& s) {
  std::map<std::string, std::string> out;
  std::size_t i = 0;
  while (i < s.size()) {
    auto eq = s.find('=', i);
    if (eq == std::string::npos) break;
    std::string key = s.substr(i, eq - i);
    std::size_t v = eq + 2;  // skip ="
    std::string value;
    while (v < s.size() && s[v] != '"') {
      if (s[v] == '\\' && v + 1 < s.size()) ++v;
      value += s[v++];
    }
    out[key] = value;
    i = v + 1;
    if (i < s.size() && s[i] == ',') ++i;
  }
  return out;
}

}  // namespace

std::optional<double> metric_value(const std::string& text, const std::string& name,
                                   const std::map<std::string, std::string>& labels) {
  std::istringstream in(text);
  std::string line;
  std::optional<double> sum;
  while (std::getline(in, line)) {
    if (line.empty() || line[0] == '#') continue;
    auto brace = line.find('{');
    auto space = line.rfind(' ');
    if (space == std::string::npos) continue;
    std::string metric = line.substr(0, brace == std::string::npos ? line.find(' ') : brace);
    if (metric != name) continue;
    std::map<std::string, std::string> have;
    if (brace != std::string::npos) have = parse_labels(line.substr(brace + 1, line.rfind('}') - brace - 1));
    bool match = true;
    for (const auto& [k, v] : labels) match = match && have.count(k) && have[k] == v;
    if (!match) continue;
    sum = sum.value_or(0) + std::stod(line.substr(space + 1));
  }
  return sum;
}

}  // namespace gdw::test
