// Text-log escaping: a tenant string (comm, path, pod name) can never start a line of its
// own or pass for a field.
#include <gtest/gtest.h>

#include "log/escape.h"

namespace gdw::log {
namespace {

using namespace std::string_literals;

TEST(EscapeText, PlainTextIsUnchanged) {
  EXPECT_EQ(escape_text("granted back nvidia0 (revoked by runc (pid 12, comm runc))"),
            "granted back nvidia0 (revoked by runc (pid 12, comm runc))");
  EXPECT_EQ(escape_text("quotes \"stay\" = as they are"), "quotes \"stay\" = as they are");
  EXPECT_EQ(escape_text("UTF-8 bytes stay: \xc3\xa9t\xc3\xa9"), "UTF-8 bytes stay: \xc3\xa9t\xc3\xa9");
}

TEST(EscapeText, ControlBytesBecomeEscapes) {
  EXPECT_EQ(escape_text("comm evil\nWARN forged"), "comm evil\\nWARN forged");
  EXPECT_EQ(escape_text("a\rb\tc"), "a\\rb\\tc");
  EXPECT_EQ(escape_text("nul\0bell\a esc\x1b[31m del\x7f"s),
            "nul\\u0000bell\\u0007 esc\\u001b[31m del\\u007f");
  // A backslash is escaped too, so "\n" typed by a tenant cannot pass for an escaped newline.
  EXPECT_EQ(escape_text("typed \\n"), "typed \\\\n");
}

TEST(EscapeText, NoOutputByteIsAControlByte) {
  std::string every;
  for (int c = 0; c < 256; ++c) every += static_cast<char>(c);
  for (char ch : escape_text(every)) {
    const auto c = static_cast<unsigned char>(ch);
    EXPECT_FALSE(c < 0x20 || c == 0x7f) << "byte " << int(c);
  }
}

TEST(LogfmtValue, BareWhenSafe) {
  EXPECT_EQ(logfmt_value("trainer-0"), "trainer-0");
  EXPECT_EQ(logfmt_value("/sys/fs/cgroup/devices/kubepods/pod1/abc"), "/sys/fs/cgroup/devices/kubepods/pod1/abc");
  EXPECT_EQ(logfmt_value("c 195:0 rw"), "\"c 195:0 rw\"");
}

TEST(LogfmtValue, QuotedAndEscapedWhenNot) {
  EXPECT_EQ(logfmt_value(""), "\"\"");
  EXPECT_EQ(logfmt_value("a=b"), "\"a=b\"");
  EXPECT_EQ(logfmt_value("say \"hi\""), "\"say \\\"hi\\\"\"");
  EXPECT_EQ(logfmt_value("evil\nlevel=info msg=forged"), "\"evil\\nlevel=info msg=forged\"");
  EXPECT_EQ(logfmt_value("back\\slash"), "\"back\\\\slash\"");
  EXPECT_EQ(logfmt_value("esc\x1b"), "\"esc\\u001b\"");
}

TEST(LogfmtValue, AQuotedValueCannotEndEarly) {
  // Whatever the value, the only unescaped quotes are the first and the last byte.
  const std::string v = logfmt_value("x\" writer=runc \"y\\\"");
  ASSERT_GE(v.size(), 2u);
  for (std::size_t i = 1; i + 1 < v.size(); ++i) {
    if (v[i] == '"') {
      std::size_t backslashes = 0;
      for (std::size_t j = i; j > 0 && v[j - 1] == '\\'; --j) ++backslashes;
      EXPECT_EQ(backslashes % 2, 1u) << v << " at " << i;
    }
  }
}

}  // namespace
}  // namespace gdw::log
