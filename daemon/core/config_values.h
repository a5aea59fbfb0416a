// The kinds of value a configuration key takes, each a small reader: it checks one YAML
// node and stores it in the member its key names (core/config.cpp's key table). A reader
// returns the problem in words ("must be between 10ms and 1m, got 5ms"), never throws.
// Internal to daemon/core.
#pragma once

#include <yaml-cpp/yaml.h>

#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "core/config.h"

namespace gdw::config_values {

using Problem = std::optional<std::string>;

struct Text {
  Problem operator()(const YAML::Node& n, std::string& out) const;
};
// A string that may not be empty; `problem` says why.
struct NonEmptyText {
  const char* problem;
  Problem operator()(const YAML::Node& n, std::string& out) const;
};
struct AbsolutePath {
  Problem operator()(const YAML::Node& n, std::string& out) const;
};
// An absolute path, or null / "" for none.
struct OptionalAbsolutePath {
  Problem operator()(const YAML::Node& n, std::string& out) const;
};
// A path below the cgroup root: leading and trailing slashes dropped, no "..".
struct RelativeCgroup {
  Problem operator()(const YAML::Node& n, std::string& out) const;
};
// host:port, :port, or "" (no HTTP server).
struct ListenAddress {
  Problem operator()(const YAML::Node& n, std::string& out) const;
};
// https://host[:port] (trailing slashes dropped), or "" for the in-cluster convention.
struct HttpsUrlOrEmpty {
  Problem operator()(const YAML::Node& n, std::string& out) const;
};
struct Flag {
  Problem operator()(const YAML::Node& n, bool& out) const;
};
struct Count {
  std::uint32_t min, max;
  Problem operator()(const YAML::Node& n, std::uint32_t& out) const;
};
// 0 (off, or the kernel's default), or a count in [min, max].
struct ZeroOrCount {
  std::uint32_t min, max;
  Problem operator()(const YAML::Node& n, std::uint32_t& out) const;
};
struct Period {
  Duration min, max;
  Problem operator()(const YAML::Node& n, Duration& out) const;
};
template <class E>
struct OneOf {
  std::vector<std::pair<const char*, E>> choices;
  Problem operator()(const YAML::Node& n, E& out) const;
};
// A string from a fixed set of words.
struct OneOfWords {
  std::vector<const char*> words;
  Problem operator()(const YAML::Node& n, std::string& out) const;
};
struct Texts {
  Problem operator()(const YAML::Node& n, std::vector<std::string>& out) const;
};
// A list that may not be empty; `problem` says why.
struct NonEmptyTexts {
  const char* problem;
  Problem operator()(const YAML::Node& n, std::vector<std::string>& out) const;
};
struct AbsolutePaths {
  Problem operator()(const YAML::Node& n, std::vector<std::string>& out) const;
};
// Device node names relative to devices.dev_root.
struct NodeNames {
  Problem operator()(const YAML::Node& n, std::vector<std::string>& out) const;
};
// MIG UUID → {gpu, gi, ci}; null for none.
struct MigMap {
  Problem operator()(const YAML::Node& n, std::vector<MigDevice>& out) const;
};

// The enum readers' shared half: the choice named by `n`, by index.
Problem choose(const YAML::Node& n, const std::vector<const char*>& names, std::size_t& index);

template <class E>
Problem OneOf<E>::operator()(const YAML::Node& n, E& out) const {
  std::vector<const char*> names;
  for (const auto& c : choices) names.push_back(c.first);
  std::size_t index = 0;
  if (auto p = choose(n, names, index)) return p;
  out = choices[index].second;
  return std::nullopt;
}

}  // namespace gdw::config_values
