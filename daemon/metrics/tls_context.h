// The server side of TLS for the metrics endpoint: certificate, key and client CA of a web
// config, loaded into an OpenSSL context up front, so that a bad file is an error when the
// daemon starts (or a SIGHUP keeps the running one) rather than at the first scrape.
#pragma once

#include <memory>

#include "core/result.h"
#include "metrics/web_config.h"

struct ssl_ctx_st;

namespace gdw {

class TlsContext {
 public:
  static Result<std::shared_ptr<const TlsContext>> load(const WebConfig::Tls& tls);
  ~TlsContext();
  TlsContext(const TlsContext&) = delete;
  TlsContext& operator=(const TlsContext&) = delete;
  ssl_ctx_st* get() const { return ctx_; }

 private:
  explicit TlsContext(ssl_ctx_st* ctx) : ctx_(ctx) {}
  ssl_ctx_st* ctx_;
};

}  // namespace gdw
