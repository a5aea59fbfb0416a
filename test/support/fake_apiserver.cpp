#include "support/fake_apiserver.h"

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <sstream>

namespace gdw::test {
namespace {

bool openssl(const std::vector<std::string>& args, std::string& error) {
  std::vector<std::string> argv{"openssl"};
  argv.insert(argv.end(), args.begin(), args.end());
  auto r = run_command(argv, 30s);
  if (r.exit_code == 0) return true;
  error = "openssl " + args[0] + " failed: " + r.err;
  return false;
}

std::vector<std::string> new_ec_key(const std::string& key) {
  return {"-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes", "-keyout", key};
}

}  // namespace

bool FakeApiServer::make_pki() {
  ca_ = dir_ / "ca.crt";
  const std::string ca_key = dir_ / "ca.key", key = dir_ / "server.key", csr = dir_ / "server.csr",
                    cert = dir_ / "server.crt";
  const std::string ext = dir_.write("server.ext",
                                     "subjectAltName=IP:127.0.0.1\nbasicConstraints=CA:FALSE\n"
                                     "keyUsage=digitalSignature\nextendedKeyUsage=serverAuth\n");
  std::vector<std::string> ca_args{"req", "-x509", "-days", "1", "-subj", "/CN=gdw-test-ca", "-out", ca_};
  for (auto& a : new_ec_key(ca_key)) ca_args.push_back(a);
  std::vector<std::string> csr_args{"req", "-subj", "/CN=127.0.0.1", "-out", csr};
  for (auto& a : new_ec_key(key)) csr_args.push_back(a);
  return openssl(ca_args, error_) && openssl(csr_args, error_) &&
         openssl({"x509", "-req", "-in", csr, "-CA", ca_, "-CAkey", ca_key, "-CAcreateserial", "-days", "1",
                  "-extfile", ext, "-out", cert},
                 error_);
}

FakeApiServer::FakeApiServer(bool hang, const std::string& token_node) {
  if (!make_pki()) return;
  token_file_ = dir_.write("serviceaccount/token", "token-one\n");
  log_ = dir_.write("requests.jsonl", "");
  state_ = dir_ / "state";
  dir_.write("state/mode", "ok");
  const std::string port_file = dir_ / "port";
  std::vector<std::string> argv{"python3", std::string(GDW_SOURCE_DIR) + "/test/support/fake_apiserver.py",
                                "--cert", dir_ / "server.crt", "--key", dir_ / "server.key",
                                "--port-file", port_file, "--log", log_, "--state", state_,
                                "--admission-policy",
                                std::string(GDW_SOURCE_DIR) + "/deploy/kubernetes/admission-policy.yaml",
                                "--token-node", token_node};
  if (hang) argv.push_back("--hang");
  server_ = std::make_unique<BackgroundProcess>(argv);
  auto port_text = [&] {
    std::ifstream in(port_file);
    std::string text;
    std::getline(in, text);
    return text;
  };
  if (!eventually([&] { return !port_text().empty() || !server_->running(); }, 10s) || port_text().empty()) {
    error_ = "fake_apiserver.py did not start: " + server_->output();
    return;
  }
  port_ = std::stoi(port_text());
}

FakeApiServer::~FakeApiServer() = default;  // BackgroundProcess kills the server by PID

std::string FakeApiServer::other_ca_file() {
  const std::string crt = dir_ / "other-ca.crt";
  std::vector<std::string> args{"req", "-x509", "-days", "1", "-subj", "/CN=gdw-other-ca", "-out", crt};
  for (auto& a : new_ec_key(dir_ / "other-ca.key")) args.push_back(a);
  std::string ignored;
  openssl(args, ignored);
  return crt;
}

void FakeApiServer::rotate_token(const std::string& token) {
  const std::string fresh = dir_.write("serviceaccount/token.new", token + "\n");
  std::rename(fresh.c_str(), token_file_.c_str());
}

std::vector<RecordedRequest> FakeApiServer::requests() const {
  std::vector<RecordedRequest> out;
  std::istringstream lines(read_file(log_));
  std::string line;
  while (std::getline(lines, line)) {
    auto j = nlohmann::json::parse(line, nullptr, false);
    if (j.is_discarded()) continue;
    RecordedRequest r{j["method"], j["path"], j["authorization"], j["content_type"], j.value("user_agent", ""),
                      j.value("time", 0.0), nullptr};
    r.body = nlohmann::json::parse(j["body"].get<std::string>(), nullptr, false);
    if (r.body.is_discarded()) r.body = nullptr;
    out.push_back(std::move(r));
  }
  return out;
}

std::string FakeApiServer::config_yaml(const std::string& events_extra, const std::string& conditions_extra) const {
  return "kubernetes:\n  api_server: " + url() + "\n  token_file: " + token_file_ + "\n  ca_file: " + ca_ +
         "\nevents:\n  enabled: true\n" + events_extra + "conditions:\n  enabled: " +
         (conditions_extra.empty() ? "false\n" : "true\n" + conditions_extra);
}

void FakeApiServer::set_mode(const std::string& mode) {
  const std::string path = state_ + "/mode";
  write_file(path + ".tmp", mode);
  std::rename((path + ".tmp").c_str(), path.c_str());
}

void FakeApiServer::command(const nlohmann::json& c) {
  std::ofstream out(state_ + "/commands.jsonl", std::ios::app);
  out << c.dump() << "\n";
}

void FakeApiServer::add_pod(const nlohmann::json& pod) { command({{"add", pod}}); }
void FakeApiServer::modify_pod(const nlohmann::json& pod) { command({{"modify", pod}}); }
void FakeApiServer::delete_pod(const std::string& ns, const std::string& name) {
  command({{"delete", {ns, name}}});
}
void FakeApiServer::set_node_conditions(const nlohmann::json& conditions) {
  command({{"node_conditions", conditions}});
}
void FakeApiServer::compact() { command({{"compact", true}}); }
void FakeApiServer::drop_watches() { command({{"drop", true}}); }
void FakeApiServer::expire_watches(const MissedPodChanges& missed) {
  nlohmann::json changes = nlohmann::json::array();
  for (const auto& pod : missed.added) changes.push_back({{"add", pod}});
  for (const auto& [ns, name] : missed.deleted) changes.push_back({{"delete", {ns, name}}});
  command({{"expire", changes}});  // one command: applied at once, before any watch sends
}

std::map<std::string, nlohmann::json> FakeApiServer::node_conditions() const {
  std::map<std::string, nlohmann::json> out;
  if (!std::filesystem::exists(state_ + "/node.json")) return out;  // no PATCH yet
  auto node = nlohmann::json::parse(read_file(state_ + "/node.json"), nullptr, false);
  if (!node.is_object()) return out;
  for (const auto& c : node["conditions"]) out[c.value("type", "")] = c;
  return out;
}

nlohmann::json FakeApiServer::pod_condition(const std::string& ns, const std::string& name,
                                            const std::string& type) const {
  if (!std::filesystem::exists(state_ + "/pods.json")) return nullptr;  // no pod yet
  auto pods = nlohmann::json::parse(read_file(state_ + "/pods.json"), nullptr, false);
  if (!pods.is_array()) return nullptr;
  for (const auto& p : pods) {
    if (p["metadata"].value("namespace", "") != ns || p["metadata"].value("name", "") != name) continue;
    if (!p.contains("status") || !p["status"].contains("conditions")) return nullptr;
    for (const auto& c : p["status"]["conditions"])
      if (c.value("type", "") == type) return c;
  }
  return nullptr;
}

std::vector<RecordedRequest> FakeApiServer::requests_to(const std::string& method, const std::string& prefix) const {
  std::vector<RecordedRequest> out;
  for (auto& r : requests())
    if (r.method == method && r.path.rfind(prefix, 0) == 0) out.push_back(std::move(r));
  return out;
}

}  // namespace gdw::test
