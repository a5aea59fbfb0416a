#include "metrics/basic_auth.h"

#include <crypt.h>
#include <openssl/evp.h>

#include <cctype>
#include <cstring>
#include <memory>

namespace gdw {
namespace {

// Compares without an early exit on the first differing byte.
bool same(std::string_view a, std::string_view b) {
  unsigned char diff = a.size() == b.size() ? 0 : 1;
  const std::size_t n = a.size() < b.size() ? a.size() : b.size();
  for (std::size_t i = 0; i < n; ++i) diff |= static_cast<unsigned char>(a[i] ^ b[i]);
  return diff == 0;
}

int base64_value(char c) {
  if (c >= 'A' && c <= 'Z') return c - 'A';
  if (c >= 'a' && c <= 'z') return c - 'a' + 26;
  if (c >= '0' && c <= '9') return c - '0' + 52;
  if (c == '+') return 62;
  if (c == '/') return 63;
  return -1;
}

// Used when the user is unknown, so that the answer takes as long as for a known user.
constexpr const char* kUnknownUserHash = "$2b$10$ojMi96ah8PkaSXg5o3GFheqbiCQ8gGF9rwPUnAZTBZRpAuOy2NLZK";

}  // namespace

bool decode_base64(std::string_view in, std::string& out) {
  out.clear();
  if (in.size() % 4 != 0) return false;
  std::uint32_t acc = 0;
  int bits = 0;
  std::size_t padding = 0;
  for (std::size_t i = 0; i < in.size(); ++i) {
    if (in[i] == '=') {
      if (i + 2 < in.size()) return false;  // only the last two may be padding
      ++padding;
      continue;
    }
    if (padding) return false;
    const int v = base64_value(in[i]);
    if (v < 0) return false;
    acc = (acc << 6) | static_cast<std::uint32_t>(v);
    bits += 6;
    if (bits >= 8) {
      bits -= 8;
      out.push_back(static_cast<char>((acc >> bits) & 0xff));
    }
  }
  return true;
}

BasicAuth::BasicAuth(std::map<std::string, std::string> users) : users_(std::move(users)) {}

bool BasicAuth::verify_hash(const std::string& password, const std::string& hash) {
  auto data = std::make_unique<crypt_data>();
  std::memset(data.get(), 0, sizeof(crypt_data));
  const char* out = crypt_rn(password.c_str(), hash.c_str(), data.get(), sizeof(crypt_data));
  return out != nullptr && out[0] != '*' && same(out, hash);
}

bool BasicAuth::allows(std::string_view authorization) const {
  constexpr std::string_view kScheme = "Basic ";
  if (authorization.size() <= kScheme.size() || authorization.size() > 4096) return false;
  for (std::size_t i = 0; i < kScheme.size(); ++i)  // the scheme is case-insensitive
    if (std::tolower(static_cast<unsigned char>(authorization[i])) !=
        std::tolower(static_cast<unsigned char>(kScheme[i])))
      return false;
  std::string credentials;
  if (!decode_base64(authorization.substr(kScheme.size()), credentials)) return false;
  const auto colon = credentials.find(':');
  if (colon == std::string::npos) return false;
  const std::string user = credentials.substr(0, colon);
  const std::string password = credentials.substr(colon + 1);

  // Every name is compared, so the time does not tell how much of a name was right.
  const std::string* hash = nullptr;
  for (const auto& [name, h] : users_)
    if (same(name, user)) hash = &h;

  Digest digest{};
  unsigned int length = 0;
  const std::string keyed = user + '\0' + password;
  EVP_Digest(keyed.data(), keyed.size(), digest.data(), &length, EVP_sha256(), nullptr);
  if (hash) {
    std::lock_guard lock(cache_mutex_);
    if (verified_.count(digest)) return true;
  }
  bool ok = false;
  {
    std::lock_guard lock(verify_mutex_);
    ok = verify_hash(password, hash ? *hash : kUnknownUserHash) && hash != nullptr;
  }
  if (ok) {
    std::lock_guard lock(cache_mutex_);
    if (verified_.size() >= kCacheSize) verified_.clear();  // bounded; refilled by the next scrapes
    verified_.insert(digest);
  }
  return ok;
}

}  // namespace gdw
