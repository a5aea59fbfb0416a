#include "core/config_values.h"

#include <charconv>
#include <set>

namespace gdw::config_values {
namespace {

Problem read_uint(const YAML::Node& n, std::uint64_t& v) {
  if (!n.IsScalar()) return "expected an integer";
  const std::string& s = n.Scalar();
  auto [p, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
  if (s.empty() || ec != std::errc() || p != s.data() + s.size()) return "expected an integer, got '" + s + "'";
  return std::nullopt;
}

std::string range_text(std::uint64_t min, std::uint64_t max) {
  return "between " + std::to_string(min) + " and " + std::to_string(max);
}

}  // namespace

Problem Text::operator()(const YAML::Node& n, std::string& out) const {
  if (!n.IsScalar()) return "expected a string";
  out = n.Scalar();
  return std::nullopt;
}

Problem NonEmptyText::operator()(const YAML::Node& n, std::string& out) const {
  if (auto p = Text{}(n, out)) return p;
  return out.empty() ? Problem(problem) : std::nullopt;
}

Problem AbsolutePath::operator()(const YAML::Node& n, std::string& out) const {
  if (auto p = Text{}(n, out)) return p;
  if (out.empty() || out[0] != '/') return "must be an absolute path, got '" + out + "'";
  while (out.size() > 1 && out.back() == '/') out.pop_back();
  return std::nullopt;
}

Problem OptionalAbsolutePath::operator()(const YAML::Node& n, std::string& out) const {
  if (n.IsNull() || (n.IsScalar() && n.Scalar().empty())) {
    out.clear();
    return std::nullopt;
  }
  return AbsolutePath{}(n, out);
}

Problem RelativeCgroup::operator()(const YAML::Node& n, std::string& out) const {
  if (auto p = Text{}(n, out)) return p;
  while (!out.empty() && out.front() == '/') out.erase(out.begin());
  while (!out.empty() && out.back() == '/') out.pop_back();
  if (out.find("..") != std::string::npos) return "must not contain '..'";
  return std::nullopt;
}

Problem ListenAddress::operator()(const YAML::Node& n, std::string& out) const {
  if (auto p = Text{}(n, out)) return p;
  if (out.empty()) return std::nullopt;  // no HTTP server
  auto colon = out.rfind(':');
  if (colon == std::string::npos) return "must be host:port, :port or empty, got '" + out + "'";
  std::string host = out.substr(0, colon);
  if (host.size() >= 2 && host.front() == '[' && host.back() != ']') return "bad IPv6 host in '" + out + "'";
  std::string port = out.substr(colon + 1);
  std::uint32_t v = 0;
  auto [p, ec] = std::from_chars(port.data(), port.data() + port.size(), v);
  if (port.empty() || ec != std::errc() || p != port.data() + port.size() || v == 0 || v > 65535)
    return "port must be 1-65535 in '" + out + "'";
  return std::nullopt;
}

Problem HttpsUrlOrEmpty::operator()(const YAML::Node& n, std::string& out) const {
  if (auto p = Text{}(n, out)) return p;
  while (!out.empty() && out.back() == '/') out.pop_back();
  if (out.empty()) return std::nullopt;
  if (out.rfind("https://", 0) != 0 || out.size() == 8 || out.find_first_of("/?# ", 8) != std::string::npos)
    return "must be https://host[:port] or empty, got '" + out + "'";
  return std::nullopt;
}

Problem Flag::operator()(const YAML::Node& n, bool& out) const {
  if (!n.IsScalar()) return "expected true or false";
  const std::string& s = n.Scalar();
  if (s == "true" || s == "True" || s == "TRUE") {
    out = true;
  } else if (s == "false" || s == "False" || s == "FALSE") {
    out = false;
  } else {
    return "expected true or false, got '" + s + "'";
  }
  return std::nullopt;
}

Problem Count::operator()(const YAML::Node& n, std::uint32_t& out) const {
  std::uint64_t v = 0;
  if (auto p = read_uint(n, v)) return p;
  if (v < min || v > max) return "must be " + range_text(min, max) + ", got " + n.Scalar();
  out = static_cast<std::uint32_t>(v);
  return std::nullopt;
}

Problem ZeroOrCount::operator()(const YAML::Node& n, std::uint32_t& out) const {
  std::uint64_t v = 0;
  if (auto p = read_uint(n, v)) return p;
  if (v > max) return "must be " + range_text(0, max) + ", got " + n.Scalar();
  if (v != 0 && v < min) return "must be 0 or " + range_text(min, max) + ", got " + n.Scalar();
  out = static_cast<std::uint32_t>(v);
  return std::nullopt;
}

Problem Period::operator()(const YAML::Node& n, Duration& out) const {
  if (!n.IsScalar()) return "expected a duration such as 500ms, 30s, 5m";
  auto d = parse_duration(n.Scalar());
  if (!d) return d.error().message;
  if (*d < min || *d > max)
    return "must be between " + format_duration(min) + " and " + format_duration(max) + ", got " + n.Scalar();
  out = *d;
  return std::nullopt;
}

Problem choose(const YAML::Node& n, const std::vector<const char*>& names, std::size_t& index) {
  std::string s;
  if (auto p = Text{}(n, s)) return p;
  std::string all;
  for (std::size_t i = 0; i < names.size(); ++i) {
    if (s == names[i]) {
      index = i;
      return std::nullopt;
    }
    all += all.empty() ? names[i] : std::string(" | ") + names[i];
  }
  return "must be one of " + all + ", got '" + s + "'";
}

Problem OneOfWords::operator()(const YAML::Node& n, std::string& out) const {
  std::size_t index = 0;
  if (auto p = choose(n, words, index)) return p;
  out = words[index];
  return std::nullopt;
}

Problem Texts::operator()(const YAML::Node& n, std::vector<std::string>& out) const {
  if (!n.IsSequence()) return "expected a list of strings";
  std::vector<std::string> items;
  for (const auto& item : n) {
    if (!item.IsScalar() || item.Scalar().empty()) return "expected a list of non-empty strings";
    items.push_back(item.Scalar());
  }
  out = std::move(items);
  return std::nullopt;
}

Problem NonEmptyTexts::operator()(const YAML::Node& n, std::vector<std::string>& out) const {
  if (auto p = Texts{}(n, out)) return p;
  return out.empty() ? Problem(problem) : std::nullopt;
}

Problem AbsolutePaths::operator()(const YAML::Node& n, std::vector<std::string>& out) const {
  std::vector<std::string> paths;
  if (auto p = Texts{}(n, paths)) return p;
  for (const auto& path : paths)
    if (path[0] != '/') return "'" + path + "' must be an absolute path";
  out = std::move(paths);
  return std::nullopt;
}

Problem NodeNames::operator()(const YAML::Node& n, std::vector<std::string>& out) const {
  std::vector<std::string> names;
  if (auto p = Texts{}(n, names)) return p;
  for (const auto& name : names) {
    if (name.front() == '/' || name.find("..") != std::string::npos)
      return "'" + name + "' must be a node name relative to devices.dev_root";
  }
  out = std::move(names);
  return std::nullopt;
}

namespace {

// One MIG_UUID: {gpu: N, gi: N, ci: N} entry; `where` names it in problems.
Problem read_mig(const YAML::Node& v, const std::string& where, MigDevice& mig) {
  if (!v.IsMap()) return where + ": expected {gpu: N, gi: N, ci: N}";
  std::set<std::string> seen;
  for (const auto& f : v) {
    const std::string field = f.first.Scalar();
    std::uint32_t* target = field == "gpu" ? &mig.gpu_minor
                            : field == "gi" ? &mig.gpu_instance
                            : field == "ci" ? &mig.compute_instance
                                            : nullptr;
    if (!target) return where + ": unknown field '" + field + "' (expected gpu, gi, ci)";
    if (auto p = Count{0, 255}(f.second, *target)) return where + "." + field + ": " + *p;
    seen.insert(field);
  }
  if (seen.size() != 3) return where + ": needs all of gpu, gi, ci";
  return std::nullopt;
}

}  // namespace

Problem MigMap::operator()(const YAML::Node& n, std::vector<MigDevice>& out) const {
  if (n.IsNull()) {
    out.clear();
    return std::nullopt;
  }
  if (!n.IsMap()) return "expected a mapping of MIG UUID to {gpu, gi, ci}";
  std::vector<MigDevice> migs;
  for (const auto& kv : n) {
    MigDevice mig;
    mig.uuid = kv.first.Scalar();
    const std::string where = "'" + mig.uuid + "' (line " + std::to_string(kv.first.Mark().line + 1) + ")";
    if (mig.uuid.rfind("MIG-", 0) != 0) return where + ": key must be a MIG UUID (MIG-…)";
    if (auto p = read_mig(kv.second, where, mig)) return p;
    migs.push_back(mig);
  }
  out = std::move(migs);
  return std::nullopt;
}

}  // namespace gdw::config_values
