#include "kube/api_transport.h"

#include <curl/curl.h>
#include <strings.h>

#include <algorithm>
#include <cstring>
#include <string_view>

#include "kube/backoff.h"

namespace gdw::kube {
namespace {

struct CurlGlobal {
  CurlGlobal() { curl_global_init(CURL_GLOBAL_DEFAULT); }
};

// What the write callback needs while an exchange runs.
struct Exchange {
  const ApiRequest* request;
  ApiResponse* response;
  CURL* easy;
  bool streaming_decided = false;
  bool streaming = false;
};

std::size_t on_data(char* data, std::size_t size, std::size_t n, void* user) {
  auto* x = static_cast<Exchange*>(user);
  const std::size_t bytes = size * n;
  if (!x->streaming_decided) {
    long status = 0;
    curl_easy_getinfo(x->easy, CURLINFO_RESPONSE_CODE, &status);
    x->streaming = x->request->on_body && status >= 200 && status < 300;
    x->streaming_decided = true;
  }
  if (x->streaming) return x->request->on_body(std::string_view(data, bytes)) ? bytes : 0;
  std::string& body = x->response->body;
  const std::size_t room = x->request->max_body > body.size() ? x->request->max_body - body.size() : 0;
  body.append(data, std::min(bytes, room));
  if (bytes <= room) return bytes;
  long status = 0;
  curl_easy_getinfo(x->easy, CURLINFO_RESPONSE_CODE, &status);
  if (status < 200 || status >= 300) return bytes;  // an error's text: cut, the status is what counts
  x->response->truncated = true;
  return 0;  // a 2xx answer larger than asked for: not read on
}

// Each header line of the answer: only Retry-After is kept (of the last response, when
// curl followed none: the API server's).
std::size_t on_header(char* data, std::size_t size, std::size_t n, void* user) {
  auto* x = static_cast<Exchange*>(user);
  const std::string_view line(data, size * n);
  constexpr std::string_view kName = "retry-after:";
  if (line.size() > kName.size() && strncasecmp(line.data(), kName.data(), kName.size()) == 0)
    x->response->retry_after = parse_retry_after(line.substr(kName.size()));
  return size * n;
}

curl_slist* headers_for(const ApiRequest& req, const std::string& token) {
  const std::string auth = "Authorization: Bearer " + token;
  const std::string type = std::string("Content-Type: ") + req.content_type;
  curl_slist* headers = nullptr;
  headers = curl_slist_append(headers, auth.c_str());
  if (req.body) headers = curl_slist_append(headers, type.c_str());
  headers = curl_slist_append(headers, "Accept: application/json");
  return headers;
}

void set_options(CURL* h, const ApiRequest& req, const ApiEndpoint& ep, curl_slist* headers, char* errbuf,
                 Exchange* exchange, const std::string& user_agent) {
  curl_easy_setopt(h, CURLOPT_URL, (ep.server + req.path).c_str());
  curl_easy_setopt(h, CURLOPT_USERAGENT, user_agent.c_str());
  curl_easy_setopt(h, CURLOPT_HEADERFUNCTION, on_header);
  curl_easy_setopt(h, CURLOPT_HEADERDATA, exchange);
  curl_easy_setopt(h, CURLOPT_PROTOCOLS_STR, "https");
  if (req.body) {
    curl_easy_setopt(h, CURLOPT_CUSTOMREQUEST, req.method);
    curl_easy_setopt(h, CURLOPT_POSTFIELDS, req.body->c_str());
    curl_easy_setopt(h, CURLOPT_POSTFIELDSIZE, static_cast<long>(req.body->size()));
  } else {
    curl_easy_setopt(h, CURLOPT_HTTPGET, 1L);
  }
  curl_easy_setopt(h, CURLOPT_HTTPHEADER, headers);
  curl_easy_setopt(h, CURLOPT_CAINFO, ep.ca_file.c_str());
  curl_easy_setopt(h, CURLOPT_SSL_VERIFYPEER, 1L);
  curl_easy_setopt(h, CURLOPT_SSL_VERIFYHOST, 2L);
  curl_easy_setopt(h, CURLOPT_CONNECTTIMEOUT_MS, static_cast<long>(req.connect_timeout.count()));
  curl_easy_setopt(h, CURLOPT_TIMEOUT_MS, static_cast<long>(req.timeout.count()));
  if (req.idle_timeout.count() > 0) {
    curl_easy_setopt(h, CURLOPT_LOW_SPEED_LIMIT, 1L);
    curl_easy_setopt(h, CURLOPT_LOW_SPEED_TIME, static_cast<long>(req.idle_timeout.count()));
  }
  curl_easy_setopt(h, CURLOPT_NOSIGNAL, 1L);
  curl_easy_setopt(h, CURLOPT_ERRORBUFFER, errbuf);
  curl_easy_setopt(h, CURLOPT_WRITEFUNCTION, on_data);
  curl_easy_setopt(h, CURLOPT_WRITEDATA, exchange);
}

}  // namespace

ApiTransport::ApiTransport(ApiEndpoint endpoint) : endpoint_(std::move(endpoint)), user_agent_(user_agent(node_name())) {
  // curl_global_init is not thread-safe: the first transport is made on the loop's thread,
  // before any worker runs.
  static CurlGlobal global;
  easy_ = curl_easy_init();
  multi_ = curl_multi_init();
}

ApiTransport::~ApiTransport() {
  if (easy_) curl_easy_cleanup(easy_);
  if (multi_) curl_multi_cleanup(multi_);
}

void ApiTransport::stop() {
  stop_ = true;
  if (multi_) curl_multi_wakeup(multi_);
}

ApiResponse ApiTransport::perform(const ApiRequest& req, const std::string& token) {
  ApiResponse r;
  if (!easy_ || !multi_) {
    r.error = "curl_easy_init failed";
    return r;
  }
  if (stop_) {
    r.stopped = true;
    r.error = "stopping";
    return r;
  }
  curl_easy_reset(easy_);  // the multi handle keeps the connection: one TLS handshake for a burst
  char errbuf[CURL_ERROR_SIZE] = "";
  Exchange exchange{&req, &r, easy_};
  curl_slist* headers = headers_for(req, token);
  set_options(easy_, req, endpoint_, headers, errbuf, &exchange, user_agent_);
  curl_multi_add_handle(multi_, easy_);
  int running = 1;
  CURLcode result = CURLE_OK;
  while (running) {
    if (curl_multi_perform(multi_, &running) != CURLM_OK) break;
    if (!running) break;
    if (stop_) {
      r.stopped = true;
      break;
    }
    curl_multi_poll(multi_, nullptr, 0, 1000, nullptr);
  }
  int left = 0;
  bool finished = false;
  while (CURLMsg* msg = curl_multi_info_read(multi_, &left)) {
    if (msg->msg == CURLMSG_DONE && msg->easy_handle == easy_) {
      result = msg->data.result;
      finished = true;
    }
  }
  curl_easy_getinfo(easy_, CURLINFO_RESPONSE_CODE, &r.status);
  curl_multi_remove_handle(multi_, easy_);
  curl_slist_free_all(headers);
  if (r.stopped || !finished) {
    r.error = r.stopped ? "stopped" : "curl_multi_perform failed";
    return r;
  }
  if (result == CURLE_OK) return r;
  if (r.truncated) {
    r.error = "the answer exceeds " + std::to_string(req.max_body) + " bytes";
    return r;
  }
  r.error = errbuf[0] ? errbuf : curl_easy_strerror(result);
  // A streamed answer keeps its status (a watch that broke off); any other has none.
  if (!req.on_body) r.status = 0;
  return r;
}

}  // namespace gdw::kube
