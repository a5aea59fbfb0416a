#include "kube/api_names.h"

namespace gdw::kube {

bool dns_label(const std::string& s) {
  if (s.empty() || s.size() > 63) return false;
  for (char ch : s)
    if (!((ch >= 'a' && ch <= 'z') || (ch >= '0' && ch <= '9') || ch == '-')) return false;
  return s.front() != '-' && s.back() != '-';
}

bool dns_subdomain(const std::string& s) {
  if (s.empty() || s.size() > 253) return false;
  for (char ch : s)
    if (!((ch >= 'a' && ch <= 'z') || (ch >= '0' && ch <= '9') || ch == '-' || ch == '.')) return false;
  return s.front() != '-' && s.front() != '.' && s.back() != '-' && s.back() != '.';
}

bool uid_text(const std::string& s) {
  if (s.empty() || s.size() > 64) return false;
  for (char ch : s)
    if (!((ch >= 'a' && ch <= 'f') || (ch >= 'A' && ch <= 'F') || (ch >= '0' && ch <= '9') || ch == '-')) return false;
  return true;
}

}  // namespace gdw::kube
