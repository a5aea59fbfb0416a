#include "kube/api_endpoint.h"

#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <sstream>

#include "build_info.h"

namespace gdw::kube {

std::optional<std::string> api_server_url(const std::string& configured, const char* service_host,
                                          const char* service_port) {
  if (!configured.empty()) return configured;
  if (!service_host || !*service_host) return std::nullopt;
  std::string host = service_host;
  if (host.find(':') != std::string::npos && host.front() != '[') host = "[" + host + "]";
  const std::string port = service_port && *service_port ? service_port : "443";
  return "https://" + host + ":" + port;
}

std::string node_name() {
  if (const char* env = std::getenv("NODE_NAME"); env && *env) return env;
  char host[256] = "";
  if (::gethostname(host, sizeof host - 1) != 0) return "";
  return host;
}

std::string user_agent(const std::string& node) {
  std::string name = node.substr(0, 253);
  for (char& ch : name)
    if (static_cast<unsigned char>(ch) < 0x21 || static_cast<unsigned char>(ch) > 0x7e || ch == '(' || ch == ')') ch = '_';
  return std::string("gpu-devwatch/") + GDW_VERSION + " (" + name + ")";
}

Result<std::string> parse_token(const std::string& content) {
  std::size_t begin = content.find_first_not_of(" \t\r\n");
  if (begin == std::string::npos) return Error{"is empty"};
  std::size_t end = content.find_last_not_of(" \t\r\n");
  std::string token = content.substr(begin, end - begin + 1);
  for (unsigned char ch : token)
    if (ch < 0x21 || ch > 0x7e) return Error{"holds characters a bearer token cannot have"};
  return token;
}

Result<std::string> TokenFile::get() {
  struct stat st{};
  if (::stat(path_.c_str(), &st) != 0) return Error{"cannot stat token file " + path_ + ": " + std::strerror(errno)};
  const auto now = std::chrono::steady_clock::now();
  const bool changed = st.st_ino != ino_ || st.st_dev != dev_ || st.st_size != size_ ||
                       st.st_mtim.tv_sec != mtime_.tv_sec || st.st_mtim.tv_nsec != mtime_.tv_nsec;
  if (!token_.empty() && !changed && now - read_at_ < max_age_) return token_;
  std::ifstream in(path_);
  if (!in) return Error{"cannot read token file " + path_ + ": " + std::strerror(errno)};
  std::stringstream ss;
  ss << in.rdbuf();
  auto token = parse_token(ss.str());
  if (!token) return Error{"token file " + path_ + " " + token.error().message};
  token_ = std::move(*token);
  ino_ = st.st_ino;
  dev_ = st.st_dev;
  size_ = st.st_size;
  mtime_ = st.st_mtim;
  read_at_ = now;
  return token_;
}

}  // namespace gdw::kube
