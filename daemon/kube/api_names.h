// The shapes of names the API server accepts (RFC 1123 labels and subdomains, object
// UIDs). Names reach a request path or a JSON body only after passing these: they come
// from the allocation record and the pod's own metadata, both tenant-influenced.
#pragma once

#include <string>

namespace gdw::kube {

bool dns_label(const std::string& s);      // a namespace: [a-z0-9-], at most 63
bool dns_subdomain(const std::string& s);  // a pod or node name: labels joined by '.', at most 253
bool uid_text(const std::string& s);       // an object UID: hex digits and '-', at most 64

}  // namespace gdw::kube
