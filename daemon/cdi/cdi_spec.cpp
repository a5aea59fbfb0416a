#include "cdi/cdi_spec.h"

#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <charconv>
#include <nlohmann/json.hpp>
#include <set>

namespace gdw {
namespace {

using json = nlohmann::json;

constexpr int kMaxDepth = 64;  // specs nest 5 deep; anything far deeper is not a spec
constexpr std::uint64_t kMaxMajor = 4095;      // 12 bits in dev_t
constexpr std::uint64_t kMaxMinor = 1048575;   // 20 bits

// The CDI spec versions whose device nodes mean what this parser reads.
const std::set<std::string, std::less<>> kVersions = {"0.3.0", "0.4.0", "0.5.0", "0.6.0", "0.7.0", "0.8.0"};

// YAML as the JSON document it denotes, with every scalar a string (the field readers
// accept numbers as strings); nullopt and `error` set when it cannot be one.
std::optional<json> yaml_to_json(const YAML::Node& node, int depth, std::string& error) {
  if (depth > kMaxDepth) {
    error = "nested deeper than " + std::to_string(kMaxDepth) + " levels";
    return std::nullopt;
  }
  switch (node.Type()) {
    case YAML::NodeType::Null:
    case YAML::NodeType::Undefined:
      return json(nullptr);
    case YAML::NodeType::Scalar:
      return json(node.Scalar());
    case YAML::NodeType::Sequence: {
      json out = json::array();
      for (const auto& item : node) {
        auto v = yaml_to_json(item, depth + 1, error);
        if (!v) return std::nullopt;
        out.push_back(std::move(*v));
      }
      return out;
    }
    case YAML::NodeType::Map: {
      json out = json::object();
      for (const auto& kv : node) {
        if (!kv.first.IsScalar()) {
          error = "line " + std::to_string(kv.first.Mark().line + 1) + ": keys must be plain strings";
          return std::nullopt;
        }
        auto v = yaml_to_json(kv.second, depth + 1, error);
        if (!v) return std::nullopt;
        out[kv.first.Scalar()] = std::move(*v);
      }
      return out;
    }
  }
  return json(nullptr);
}

Result<json> load_document(std::string_view text, CdiFormat format) {
  if (format == CdiFormat::kJson) {
    json doc = json::parse(text.begin(), text.end(), nullptr, false);
    if (doc.is_discarded()) return Error{"not valid JSON"};
    return doc;
  }
  try {
    YAML::Node root = YAML::Load(std::string(text));
    std::string error;
    auto doc = yaml_to_json(root, 0, error);
    if (!doc) return Error{error};
    return std::move(*doc);
  } catch (const YAML::Exception& e) {
    return Error{"line " + std::to_string(e.mark.line + 1) + ": invalid YAML: " + e.msg};
  }
}

// A field that may be absent (or null); present with another type: an error.
Result<std::optional<std::string>> optional_string(const json& object, const char* key, const std::string& where) {
  auto it = object.find(key);
  if (it == object.end() || it->is_null()) return std::optional<std::string>{};
  if (!it->is_string()) return Error{where + key + ": expected a string"};
  return std::optional<std::string>{it->get<std::string>()};
}

Result<std::optional<std::uint64_t>> optional_number(const json& object, const char* key, std::uint64_t max,
                                                      const std::string& where) {
  auto it = object.find(key);
  if (it == object.end() || it->is_null()) return std::optional<std::uint64_t>{};
  std::uint64_t value = 0;
  if (it->is_number_unsigned()) {
    value = it->get<std::uint64_t>();
  } else if (it->is_string()) {
    const std::string& s = it->get_ref<const std::string&>();
    auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), value);
    if (s.empty() || ec != std::errc() || end != s.data() + s.size())
      return Error{where + key + ": expected a non-negative integer, got '" + s + "'"};
  } else {
    return Error{where + key + ": expected a non-negative integer"};
  }
  if (value > max) return Error{where + key + ": " + std::to_string(value) + " is above " + std::to_string(max)};
  return std::optional<std::uint64_t>{value};
}

bool is_alnum(char c) { return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9'); }

bool valid_name(std::string_view s, std::string_view extra) {
  if (s.empty() || !is_alnum(s.front())) return false;
  return std::all_of(s.begin(), s.end(), [&](char c) { return is_alnum(c) || extra.find(c) != std::string_view::npos; });
}

// "vendor.com/class": a domain-like vendor and a class name.
bool valid_kind(std::string_view kind) {
  auto slash = kind.find('/');
  if (slash == std::string_view::npos) return false;
  return valid_name(kind.substr(0, slash), ".-") && valid_name(kind.substr(slash + 1), "._-");
}

struct NodeOutcome {
  std::optional<CdiDeviceNode> node;  // nullopt: skipped (not a character device)
  std::string skipped;
};

Result<NodeOutcome> parse_node(const json& n, const std::string& where) {
  if (!n.is_object()) return Error{where + ": expected a mapping"};
  auto path = optional_string(n, "path", where + ".");
  if (!path) return path.error();
  if (!*path || (*path)->empty() || (*path)->front() != '/') return Error{where + ".path: expected an absolute path"};
  auto host_path = optional_string(n, "hostPath", where + ".");
  if (!host_path) return host_path.error();
  if (*host_path && !(*host_path)->empty() && (*host_path)->front() != '/')
    return Error{where + ".hostPath: expected an absolute path"};
  auto type = optional_string(n, "type", where + ".");
  if (!type) return type.error();
  const std::string t = type->value_or("");
  if (t != "" && t != "c" && t != "u" && t != "b" && t != "p")
    return Error{where + ".type: expected c, u, b or p, got '" + t + "'"};
  auto major = optional_number(n, "major", kMaxMajor, where + ".");
  if (!major) return major.error();
  auto minor = optional_number(n, "minor", kMaxMinor, where + ".");
  if (!minor) return minor.error();
  auto permissions = optional_string(n, "permissions", where + ".");
  if (!permissions) return permissions.error();
  const std::string perms = permissions->value_or("");
  if (perms.find_first_not_of("rwm") != std::string::npos)
    return Error{where + ".permissions: expected letters of rwm, got '" + perms + "'"};

  const std::string host = *host_path && !(*host_path)->empty() ? **host_path : **path;
  NodeOutcome out;
  if (t == "b" || t == "p") {
    out.skipped = host + " (type " + t + ")";
    return out;
  }
  CdiDeviceNode node;
  node.host_path = host;
  node.permissions = perms;
  // Numbers the spec gives are used as they are (a char device: "c", "u" or no type);
  // without them the host path's stat() decides, and only a char device counts.
  if (*major) node.number = DeviceNumber{DeviceType::kChar, static_cast<std::uint32_t>(**major),
                                         static_cast<std::uint32_t>(minor->value_or(0))};
  out.node = std::move(node);
  return out;
}

// containerEdits.deviceNodes of `owner` (a device or the spec); absent edits are none.
Status parse_edits(const json& owner, const std::string& where, std::vector<CdiDeviceNode>& nodes,
                   std::vector<std::string>& skipped, const std::string& device) {
  auto edits = owner.find("containerEdits");
  if (edits == owner.end() || edits->is_null()) return {};
  if (!edits->is_object()) return Error{where + "containerEdits: expected a mapping"};
  auto list = edits->find("deviceNodes");
  if (list == edits->end() || list->is_null()) return {};
  if (!list->is_array()) return Error{where + "containerEdits.deviceNodes: expected a list"};
  for (std::size_t i = 0; i < list->size(); ++i) {
    auto node = parse_node((*list)[i], where + "containerEdits.deviceNodes[" + std::to_string(i) + "]");
    if (!node) return node.error();
    if (node->node) nodes.push_back(std::move(*node->node));
    else skipped.push_back(device + ": " + node->skipped);
  }
  return {};
}

Status parse_devices(const json& doc, CdiSpec& spec) {
  auto devices = doc.find("devices");
  if (devices == doc.end() || !devices->is_array()) return Error{"devices: expected a list"};
  for (std::size_t i = 0; i < devices->size(); ++i) {
    const json& d = (*devices)[i];
    const std::string where = "devices[" + std::to_string(i) + "].";
    if (!d.is_object()) return Error{where.substr(0, where.size() - 1) + ": expected a mapping"};
    auto name = optional_string(d, "name", where);
    if (!name) return name.error();
    if (!*name || !valid_name(**name, "._:-"))
      return Error{where + "name: expected letters, digits and . _ : - (starting with a letter or digit)"};
    if (spec.devices.count(**name)) return Error{where + "name: device '" + **name + "' defined twice"};
    std::vector<CdiDeviceNode> nodes;
    if (auto s = parse_edits(d, where, nodes, spec.skipped, **name); !s) return s;
    spec.devices.emplace(**name, std::move(nodes));
  }
  return {};
}

}  // namespace

CdiFormat cdi_format_of(std::string_view file_name) {
  constexpr std::string_view kJson = ".json";
  return file_name.size() >= kJson.size() && file_name.substr(file_name.size() - kJson.size()) == kJson
             ? CdiFormat::kJson
             : CdiFormat::kYaml;
}

bool is_cdi_spec_file_name(std::string_view name) {
  if (name.empty() || name.front() == '.') return false;
  for (std::string_view ext : {".json", ".yaml", ".yml"}) {
    if (name.size() > ext.size() && name.substr(name.size() - ext.size()) == ext) return true;
  }
  return false;
}

Result<CdiSpec> parse_cdi_spec(std::string_view text, CdiFormat format) {
  auto doc = load_document(text, format);
  if (!doc) return doc.error();
  if (!doc->is_object()) return Error{"expected a mapping at the top"};
  CdiSpec spec;
  auto version = optional_string(*doc, "cdiVersion", "");
  if (!version) return version.error();
  if (!*version) return Error{"cdiVersion: missing"};
  if (!kVersions.count(**version))
    return Error{"cdiVersion '" + **version + "' is not supported (0.3.0 to 0.8.0)"};
  spec.version = **version;
  auto kind = optional_string(*doc, "kind", "");
  if (!kind) return kind.error();
  if (!*kind || !valid_kind(**kind)) return Error{"kind: expected vendor.com/class"};
  spec.kind = **kind;
  if (auto s = parse_devices(*doc, spec); !s) return s.error();
  if (auto s = parse_edits(*doc, "", spec.spec_nodes, spec.skipped, "(spec)"); !s) return s.error();
  return spec;
}

CdiRegistry build_cdi_registry(const std::vector<CdiSpecFile>& files) {
  CdiRegistry registry;
  for (const auto& file : files) {
    auto spec = parse_cdi_spec(file.text, cdi_format_of(file.path));
    if (!spec) {
      registry.errors.push_back(file.path + ": " + spec.error().message);
      continue;
    }
    ++registry.spec_files;
    for (auto& [name, nodes] : spec->devices) {
      const std::string qualified = spec->kind + "=" + name;
      nodes.insert(nodes.end(), spec->spec_nodes.begin(), spec->spec_nodes.end());
      registry.devices[qualified] = std::move(nodes);
      registry.defined_in[qualified] = file.path;
    }
  }
  return registry;
}

}  // namespace gdw
