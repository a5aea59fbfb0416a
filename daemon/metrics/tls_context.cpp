#include "metrics/tls_context.h"

#include <openssl/err.h>
#include <openssl/ssl.h>

#include <string>

namespace gdw {
namespace {

// The queued OpenSSL errors as one line (and the queue emptied).
std::string openssl_errors() {
  std::string text;
  while (unsigned long e = ERR_get_error()) {
    char buf[256];
    ERR_error_string_n(e, buf, sizeof buf);
    text += (text.empty() ? "" : "; ") + std::string(buf);
  }
  return text.empty() ? "unknown OpenSSL error" : text;
}

}  // namespace

Result<std::shared_ptr<const TlsContext>> TlsContext::load(const WebConfig::Tls& tls) {
  ERR_clear_error();
  SSL_CTX* ctx = SSL_CTX_new(TLS_server_method());
  if (!ctx) return Error{"creating a TLS context: " + openssl_errors()};
  std::shared_ptr<const TlsContext> owner(new TlsContext(ctx));
  SSL_CTX_set_min_proto_version(ctx, tls.min_version == TlsMinVersion::kTls13 ? TLS1_3_VERSION : TLS1_2_VERSION);
  SSL_CTX_set_options(ctx, SSL_OP_NO_RENEGOTIATION | SSL_OP_CIPHER_SERVER_PREFERENCE);
  if (SSL_CTX_use_certificate_chain_file(ctx, tls.cert_file.c_str()) != 1)
    return Error{"cert_file " + tls.cert_file + ": " + openssl_errors()};
  if (SSL_CTX_use_PrivateKey_file(ctx, tls.key_file.c_str(), SSL_FILETYPE_PEM) != 1)
    return Error{"key_file " + tls.key_file + ": " + openssl_errors()};
  if (SSL_CTX_check_private_key(ctx) != 1)
    return Error{"key_file " + tls.key_file + " does not match cert_file " + tls.cert_file + ": " + openssl_errors()};
  if (tls.client_auth != ClientAuth::kNone) {
    if (SSL_CTX_load_verify_locations(ctx, tls.client_ca_file.c_str(), nullptr) != 1)
      return Error{"client_ca_file " + tls.client_ca_file + ": " + openssl_errors()};
    STACK_OF(X509_NAME)* names = SSL_load_client_CA_file(tls.client_ca_file.c_str());
    if (names) SSL_CTX_set_client_CA_list(ctx, names);
    int mode = SSL_VERIFY_PEER;
    if (tls.client_auth == ClientAuth::kRequireAndVerify) mode |= SSL_VERIFY_FAIL_IF_NO_PEER_CERT;
    SSL_CTX_set_verify(ctx, mode, nullptr);
  }
  return owner;
}

TlsContext::~TlsContext() { SSL_CTX_free(ctx_); }

}  // namespace gdw
