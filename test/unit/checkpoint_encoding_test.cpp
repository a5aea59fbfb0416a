// The encodings inside a kubelet device checkpoint: the base64 of each entry's AllocResp,
// and the AllocateResponse protobuf itself (decoded from what kubelet wrote, encoded again
// for checkpoints the tests write). The checkpoint's own parse and checksum are
// unit/checkpoint_test.cpp's.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "kubelet/checkpoint.h"

namespace gdw {
namespace {

::testing::AssertionResult contains(const std::string& text, const std::string& part) {
  if (text.find(part) != std::string::npos) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure() << "\"" << text << "\" does not contain \"" << part << "\"";
}

constexpr const char* kGpuA = "GPU-11111111-2222-4333-8444-555555555555";

struct Base64Case {
  std::string bytes;
  std::string text;
};

void PrintTo(const Base64Case& c, std::ostream* os) { *os << '"' << c.text << '"'; }

class Base64Vector : public ::testing::TestWithParam<Base64Case> {};

TEST_P(Base64Vector, EncodesAndDecodes) {
  EXPECT_EQ(base64_encode(GetParam().bytes), GetParam().text);
  auto decoded = base64_decode(GetParam().text);
  ASSERT_TRUE(decoded.ok()) << decoded.error().message;
  EXPECT_EQ(*decoded, GetParam().bytes);
}

// RFC 4648 §10, plus bytes that exercise every bit of the alphabet's last characters.
INSTANTIATE_TEST_SUITE_P(Rfc4648, Base64Vector,
                         ::testing::Values(Base64Case{"", ""}, Base64Case{"f", "Zg=="}, Base64Case{"fo", "Zm8="},
                                           Base64Case{"foo", "Zm9v"}, Base64Case{"foob", "Zm9vYg=="},
                                           Base64Case{"fooba", "Zm9vYmE="}, Base64Case{"foobar", "Zm9vYmFy"},
                                           Base64Case{std::string("\xfb\xff\xbf\x00", 4), "+/+/AA=="}));

TEST(Base64, EveryByteValueRoundTrips) {
  std::string bytes;
  for (int i = 0; i < 256; ++i) bytes += static_cast<char>(i);
  auto decoded = base64_decode(base64_encode(bytes));
  ASSERT_TRUE(decoded.ok());
  EXPECT_EQ(*decoded, bytes);
}

struct Base64ErrorCase {
  const char* text;
  const char* message;
};

void PrintTo(const Base64ErrorCase& c, std::ostream* os) { *os << c.text; }

class Base64Rejects : public ::testing::TestWithParam<Base64ErrorCase> {};

TEST_P(Base64Rejects, WithAReason) {
  auto decoded = base64_decode(GetParam().text);
  ASSERT_FALSE(decoded.ok());
  EXPECT_TRUE(contains(decoded.error().message, GetParam().message));
}

INSTANTIATE_TEST_SUITE_P(
    NonCanonical, Base64Rejects,
    ::testing::Values(Base64ErrorCase{"Zg", "length 2 is not a multiple of 4"},
                      Base64ErrorCase{"Zm9vY", "length 5"},
                      Base64ErrorCase{"Zm-v", "'-' at offset 2 is not in the standard alphabet"},
                      Base64ErrorCase{"Zm9v\nA==", "byte 0x0a at offset 4"},
                      Base64ErrorCase{"Zg=a", "'=' at offset 2 is padding before the end"},
                      Base64ErrorCase{"Zg==Zg==", "'=' at offset 2"},
                      Base64ErrorCase{"====", "'=' at offset 0"},
                      Base64ErrorCase{"Z===", "'=' at offset 1"},
                      Base64ErrorCase{"Zh==", "non-zero bits"},
                      Base64ErrorCase{"Zm9=", "non-zero bits"}));

TEST(AllocResp, DecodesWhatItEncodes) {
  AllocResp resp;
  resp.envs = {{"NVIDIA_VISIBLE_DEVICES", kGpuA}};
  resp.devices = {{"/dev/nvidia0", "/dev/nvidia0", "rw"}};
  resp.cdi_devices = {"nvidia.com/gpu=all", "nvidia.com/gpu=0"};
  resp.annotations = {{"k", "v"}};
  auto decoded = decode_alloc_resp(encode_alloc_resp(resp));
  ASSERT_TRUE(decoded.ok()) << decoded.error().message;
  EXPECT_EQ(decoded->envs, resp.envs);
  EXPECT_EQ(decoded->devices, resp.devices);
  EXPECT_EQ(decoded->cdi_devices, resp.cdi_devices);
  EXPECT_EQ(decoded->annotations, resp.annotations);
}

TEST(AllocResp, EmptyBytesAreAnEmptyResponse) {
  auto decoded = decode_alloc_resp("");
  ASSERT_TRUE(decoded.ok());
  EXPECT_TRUE(decoded->envs.empty());
  EXPECT_TRUE(decoded->devices.empty());
}

TEST(AllocResp, RejectsTruncatedAndGarbageBytes) {
  std::string full = encode_alloc_resp(AllocResp{{{"NVIDIA_VISIBLE_DEVICES", kGpuA}}, {}, {}, {}});
  for (std::size_t cut = 1; cut < full.size(); ++cut) {
    auto decoded = decode_alloc_resp(std::string_view(full).substr(0, cut));
    EXPECT_FALSE(decoded.ok()) << "cut at " << cut;
  }
  EXPECT_FALSE(decode_alloc_resp(std::string("\xff\xff\xff", 3)).ok());
  auto error = decode_alloc_resp("\x0a\x05" "ab");
  ASSERT_FALSE(error.ok());
  EXPECT_TRUE(contains(error.error().message, "4 bytes"));
}

}  // namespace
}  // namespace gdw
