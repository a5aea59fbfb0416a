#include "metrics/web_config.h"

#include <yaml-cpp/yaml.h>

#include <fstream>
#include <initializer_list>
#include <set>
#include <sstream>
#include <utility>

namespace gdw {
namespace {

using Problem = std::optional<std::string>;

Problem scalar(const YAML::Node& n, std::string& out) {
  if (!n.IsScalar()) return "must be a string";
  out = n.Scalar();
  return std::nullopt;
}

template <class E>
Problem choice(const YAML::Node& n, E& out, std::initializer_list<std::pair<const char*, E>> choices) {
  std::string text;
  if (auto p = scalar(n, text)) return p;
  std::string names;
  for (const auto& [name, value] : choices) {
    if (text == name) {
      out = value;
      return std::nullopt;
    }
    names += (names.empty() ? "" : ", ") + std::string(name);
  }
  return "\"" + text + "\" is not supported (supported: " + names + ")";
}

// Each supported key of tls_server_config, as data.
using TlsSetter = Problem (*)(const YAML::Node&, WebConfig::Tls&);
const std::map<std::string, TlsSetter>& tls_keys() {
  static const std::map<std::string, TlsSetter> keys{
      {"cert_file", [](const YAML::Node& n, WebConfig::Tls& t) { return scalar(n, t.cert_file); }},
      {"key_file", [](const YAML::Node& n, WebConfig::Tls& t) { return scalar(n, t.key_file); }},
      {"client_ca_file", [](const YAML::Node& n, WebConfig::Tls& t) { return scalar(n, t.client_ca_file); }},
      {"client_auth_type",
       [](const YAML::Node& n, WebConfig::Tls& t) {
         // RequestClientCert and RequireAnyClientCert accept unverified certificates:
         // not offered.
         return choice(n, t.client_auth,
                       {{"NoClientCert", ClientAuth::kNone},
                        {"VerifyClientCertIfGiven", ClientAuth::kVerifyIfGiven},
                        {"RequireAndVerifyClientCert", ClientAuth::kRequireAndVerify}});
       }},
      {"min_version",
       [](const YAML::Node& n, WebConfig::Tls& t) {
         return choice(n, t.min_version, {{"TLS12", TlsMinVersion::kTls12}, {"TLS13", TlsMinVersion::kTls13}});
       }},
  };
  return keys;
}

std::string supported_tls_keys() {
  std::string names;
  for (const auto& [name, setter] : tls_keys()) names += (names.empty() ? "" : ", ") + name;
  return names;
}

// What exporter-toolkit's crypto/bcrypt accepts: $2a$, $2b$ or $2y$, a two-digit cost, 53
// characters of salt and hash.
bool looks_like_bcrypt(const std::string& h) {
  if (h.size() != 60 || h[0] != '$' || h[1] != '2' || h[3] != '$' || h[6] != '$') return false;
  if (h[2] != 'a' && h[2] != 'b' && h[2] != 'y') return false;
  if (h[4] < '0' || h[4] > '3' || h[5] < '0' || h[5] > '9') return false;
  for (std::size_t i = 7; i < h.size(); ++i) {
    const char c = h[i];
    const bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '.' || c == '/';
    if (!ok) return false;
  }
  const int cost = (h[4] - '0') * 10 + (h[5] - '0');
  return cost >= 4 && cost <= 31;
}

Result<WebConfig::Tls> parse_tls(const YAML::Node& node, const std::string& at) {
  if (!node.IsMap()) return Error{at + ": must be a map"};
  WebConfig::Tls tls;
  std::set<std::string> seen;
  for (const auto& kv : node) {
    const std::string key = kv.first.Scalar();
    if (!seen.insert(key).second) return Error{at + "." + key + ": duplicate key"};
    auto setter = tls_keys().find(key);
    if (setter == tls_keys().end())
      return Error{at + "." + key + ": not supported by gpu-devwatch (supported: " + supported_tls_keys() + ")"};
    if (auto p = setter->second(kv.second, tls)) return Error{at + "." + key + ": " + *p};
  }
  if (tls.cert_file.empty()) return Error{at + ".cert_file: required"};
  if (tls.key_file.empty()) return Error{at + ".key_file: required"};
  const bool verifies = tls.client_auth != ClientAuth::kNone;
  if (verifies && tls.client_ca_file.empty())
    return Error{at + ".client_ca_file: required when client_auth_type verifies client certificates"};
  if (!verifies && !tls.client_ca_file.empty())
    return Error{at + ".client_auth_type: client_ca_file is set but client_auth_type is NoClientCert "
                      "(set VerifyClientCertIfGiven or RequireAndVerifyClientCert)"};
  return tls;
}

Result<std::map<std::string, std::string>> parse_users(const YAML::Node& node, const std::string& at) {
  std::map<std::string, std::string> users;
  if (node.IsNull()) return users;
  if (!node.IsMap()) return Error{at + ": must be a map of user name to bcrypt hash"};
  for (const auto& kv : node) {
    const std::string user = kv.first.Scalar();
    if (users.count(user)) return Error{at + "." + user + ": duplicate user"};
    if (user.empty() || user.find(':') != std::string::npos)
      return Error{at + ": user name \"" + user + "\" is empty or contains ':'"};
    if (!kv.second.IsScalar() || !looks_like_bcrypt(kv.second.Scalar()))
      return Error{at + "." + user + ": not a bcrypt hash ($2y$, $2b$ or $2a$, 60 characters)"};
    users[user] = kv.second.Scalar();
  }
  return users;
}

}  // namespace

Result<WebConfig> parse_web_config(std::string_view yaml_text, const std::string& file_name) {
  YAML::Node root;
  try {
    root = YAML::Load(std::string(yaml_text));
  } catch (const YAML::Exception& e) {
    return Error{file_name + ":" + std::to_string(e.mark.line + 1) + ": invalid YAML: " + e.msg};
  }
  WebConfig config;
  if (root.IsNull()) return config;
  if (!root.IsMap()) return Error{file_name + ": must be a map (tls_server_config, basic_auth_users)"};
  std::set<std::string> seen;
  for (const auto& kv : root) {
    const std::string key = kv.first.Scalar();
    const std::string at = file_name + ": " + key;
    if (!seen.insert(key).second) return Error{at + ": duplicate key"};
    if (key == "tls_server_config") {
      if (kv.second.IsNull()) continue;
      auto tls = parse_tls(kv.second, at);
      if (!tls) return tls.error();
      config.tls = std::move(*tls);
    } else if (key == "basic_auth_users") {
      auto users = parse_users(kv.second, at);
      if (!users) return users.error();
      config.basic_auth_users = std::move(*users);
    } else {
      return Error{at + ": not supported by gpu-devwatch (supported: tls_server_config, basic_auth_users)"};
    }
  }
  return config;
}

Result<WebConfig> read_web_config(const std::string& path) {
  std::ifstream in(path);
  if (!in) return Error{"cannot read web config " + path};
  std::stringstream text;
  text << in.rdbuf();
  auto config = parse_web_config(text.str(), path);
  if (!config || !config->tls) return config;
  // As exporter-toolkit does: relative file names are relative to the web config's directory.
  const auto slash = path.rfind('/');
  const std::string dir = slash == std::string::npos ? "." : path.substr(0, slash);
  for (std::string* file : {&config->tls->cert_file, &config->tls->key_file, &config->tls->client_ca_file})
    if (!file->empty() && (*file)[0] != '/') *file = dir + "/" + *file;
  return config;
}

}  // namespace gdw
