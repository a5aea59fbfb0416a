// Certificates for real-TLS tests, made with the openssl CLI: a CA, a server certificate for
// 127.0.0.1/localhost and a client certificate signed by it, and a client certificate from
// another CA (one the server must not trust).
#pragma once

#include <string>

namespace gdw::test {

struct TestPki {
  std::string ca_crt, server_crt, server_key, client_crt, client_key, rogue_crt, rogue_key;
};

// Writes them into `dir`; returns "" or what failed.
std::string make_test_pki(const std::string& dir, TestPki& out);

}  // namespace gdw::test
