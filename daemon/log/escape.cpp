#include "log/escape.h"

namespace gdw::log {
namespace {

bool is_control(unsigned char c) { return c < 0x20 || c == 0x7f; }

bool needs_escape(unsigned char c, bool escape_quote) {
  return c == '\\' || (escape_quote && c == '"') || is_control(c);
}

void append_escaped(std::string& out, std::string_view text, bool escape_quote) {
  static constexpr char kHex[] = "0123456789abcdef";
  while (!text.empty()) {
    // Runs of plain characters (nearly all of a line) are appended whole.
    std::size_t plain = 0;
    while (plain < text.size() && !needs_escape(static_cast<unsigned char>(text[plain]), escape_quote)) ++plain;
    out.append(text.data(), plain);
    text.remove_prefix(plain);
    if (text.empty()) return;
    const auto c = static_cast<unsigned char>(text.front());
    text.remove_prefix(1);
    switch (c) {
      case '\n': out += "\\n"; continue;
      case '\r': out += "\\r"; continue;
      case '\t': out += "\\t"; continue;
      case '\\': out += "\\\\"; continue;
      case '"': out += "\\\""; continue;  // only when escape_quote (else plain)
      default: break;
    }
    out += "\\u00";  // another control character
    out += kHex[c >> 4];
    out += kHex[c & 0xf];
  }
}

bool needs_quotes(std::string_view value) {
  if (value.empty()) return true;
  for (char ch : value) {
    const auto c = static_cast<unsigned char>(ch);
    if (c == ' ' || c == '=' || c == '"' || c == '\\' || is_control(c)) return true;
  }
  return false;
}

}  // namespace

void append_escaped_text(std::string& out, std::string_view text) {
  append_escaped(out, text, /*escape_quote=*/false);
}

std::string escape_text(std::string_view text) {
  std::string out;
  out.reserve(text.size());
  append_escaped_text(out, text);
  return out;
}

void append_logfmt_value(std::string& out, std::string_view value) {
  if (!needs_quotes(value)) {
    out.append(value);
    return;
  }
  out += '"';
  append_escaped(out, value, /*escape_quote=*/true);
  out += '"';
}

std::string logfmt_value(std::string_view value) {
  std::string out;
  out.reserve(value.size() + 2);
  append_logfmt_value(out, value);
  return out;
}

}  // namespace gdw::log
