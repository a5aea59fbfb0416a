// Standard base64 (RFC 4648 §4, padded) as Go's encoding/json writes a []byte.
#include <array>
#include <cstdint>

#include "kubelet/checkpoint.h"

namespace gdw {
namespace {

constexpr std::string_view kAlphabet =
    "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";

constexpr std::int8_t kNotInAlphabet = -1;

constexpr std::array<std::int8_t, 256> make_decode_table() {
  std::array<std::int8_t, 256> table{};
  for (auto& v : table) v = kNotInAlphabet;
  for (std::size_t i = 0; i < kAlphabet.size(); ++i) {
    table[static_cast<unsigned char>(kAlphabet[i])] = static_cast<std::int8_t>(i);
  }
  return table;
}

constexpr auto kDecodeTable = make_decode_table();

std::string describe_char(char c) {
  auto u = static_cast<unsigned char>(c);
  if (u >= 0x20 && u < 0x7f) return std::string("'") + c + "'";
  static constexpr char kHex[] = "0123456789abcdef";
  return std::string("byte 0x") + kHex[u >> 4] + kHex[u & 0xf];
}

}  // namespace

std::string base64_encode(std::string_view bytes) {
  std::string out;
  out.reserve((bytes.size() + 2) / 3 * 4);
  std::size_t i = 0;
  for (; i + 3 <= bytes.size(); i += 3) {
    std::uint32_t group = static_cast<std::uint32_t>(static_cast<unsigned char>(bytes[i])) << 16 |
                          static_cast<std::uint32_t>(static_cast<unsigned char>(bytes[i + 1])) << 8 |
                          static_cast<unsigned char>(bytes[i + 2]);
    out += kAlphabet[group >> 18 & 0x3f];
    out += kAlphabet[group >> 12 & 0x3f];
    out += kAlphabet[group >> 6 & 0x3f];
    out += kAlphabet[group & 0x3f];
  }
  std::size_t rest = bytes.size() - i;
  if (rest > 0) {
    std::uint32_t group = static_cast<std::uint32_t>(static_cast<unsigned char>(bytes[i])) << 16;
    if (rest == 2) group |= static_cast<std::uint32_t>(static_cast<unsigned char>(bytes[i + 1])) << 8;
    out += kAlphabet[group >> 18 & 0x3f];
    out += kAlphabet[group >> 12 & 0x3f];
    out += rest == 2 ? kAlphabet[group >> 6 & 0x3f] : '=';
    out += '=';
  }
  return out;
}

// Strict: one text per byte string. kubelet only ever writes canonical base64, so anything
// else (missing padding, stray bits, whitespace) means the file was not written by kubelet.
Result<std::string> base64_decode(std::string_view text) {
  if (text.size() % 4 != 0) {
    return Error{"base64 length " + std::to_string(text.size()) + " is not a multiple of 4"};
  }
  std::size_t padding = 0;
  if (!text.empty() && text.back() == '=') padding = text[text.size() - 2] == '=' ? 2 : 1;

  std::string out;
  out.reserve(text.size() / 4 * 3);
  const std::size_t data_chars = text.size() - padding;
  std::uint32_t group = 0;
  for (std::size_t i = 0; i < data_chars; ++i) {
    std::int8_t v = kDecodeTable[static_cast<unsigned char>(text[i])];
    if (v == kNotInAlphabet) {
      return Error{"base64 " + describe_char(text[i]) + " at offset " + std::to_string(i) +
                   (text[i] == '=' ? " is padding before the end" : " is not in the standard alphabet")};
    }
    group = group << 6 | static_cast<std::uint32_t>(v);
    if (i % 4 == 3) {
      out += static_cast<char>(group >> 16 & 0xff);
      out += static_cast<char>(group >> 8 & 0xff);
      out += static_cast<char>(group & 0xff);
      group = 0;
    }
  }
  if (padding == 2) {  // 2 data characters carry 12 bits: 1 byte and 4 bits that must be 0
    if ((group & 0xf) != 0) return Error{"base64 has non-zero bits after the last byte"};
    out += static_cast<char>(group >> 4 & 0xff);
  } else if (padding == 1) {  // 3 data characters carry 18 bits: 2 bytes and 2 zero bits
    if ((group & 0x3) != 0) return Error{"base64 has non-zero bits after the last byte"};
    out += static_cast<char>(group >> 10 & 0xff);
    out += static_cast<char>(group >> 2 & 0xff);
  }
  return out;
}

}  // namespace gdw
