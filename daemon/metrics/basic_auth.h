// HTTP basic authentication against bcrypt hashes (web config's basic_auth_users).
//
// bcrypt is slow on purpose (~50-100 ms at cost 10), so a scraper that sends the same
// right password every 15 s must not pay it each time, and a flood of wrong passwords must
// not take every core: successful verifications are remembered (bounded, keyed by a
// SHA-256 of user and password, never the password itself), and verifications that miss
// that cache run one at a time.
#pragma once

#include <array>
#include <cstdint>
#include <map>
#include <mutex>
#include <set>
#include <string>
#include <string_view>

namespace gdw {

class BasicAuth {
 public:
  explicit BasicAuth(std::map<std::string, std::string> users_to_bcrypt_hash);

  // Whether an Authorization header value ("Basic <base64 user:password>") names a known
  // user with the right password. Thread-safe.
  bool allows(std::string_view authorization) const;

  // Checks `password` against a crypt(3) hash (bcrypt here) through libcrypt.
  static bool verify_hash(const std::string& password, const std::string& hash);

  static constexpr std::size_t kCacheSize = 256;

 private:
  using Digest = std::array<std::uint8_t, 32>;
  std::map<std::string, std::string> users_;
  mutable std::mutex cache_mutex_;
  mutable std::set<Digest> verified_;
  mutable std::mutex verify_mutex_;  // one bcrypt at a time
};

// Decodes standard base64 (with padding); nullopt-like empty+false on bad input.
bool decode_base64(std::string_view in, std::string& out);

}  // namespace gdw
