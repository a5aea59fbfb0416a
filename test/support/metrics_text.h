// Reading values out of a Prometheus text exposition in tests.
#pragma once

#include <map>
#include <optional>
#include <string>

namespace gdw::test {

// The value of the sample `name{labels...}` whose labels include all of `labels`;
// summed over every matching series. nullopt when no series matches.
std::optional<double> metric_value(const std::string& text, const std::string& name,
                                   const std::map<std::string, std::string>& labels = {});

}  // namespace gdw::test
