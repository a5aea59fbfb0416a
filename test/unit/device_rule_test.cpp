#include "core/device_rule.h"

#include <gtest/gtest.h>

namespace gdw {
namespace {

struct ParseCase {
  const char* text;
  bool ok;
  DeviceRule rule;
};

TEST(DeviceRule, ParsesLikeTheKernel) {
  const ParseCase cases[] = {
      {"c 195:0 rw", true, {DeviceType::kChar, 195, 0, kAccessReadWrite}},
      {"c 195:255 rwm", true, {DeviceType::kChar, 195, 255, kAccessAll}},
      {"b 8:* r", true, {DeviceType::kBlock, 8, kAnyNumber, kAccessRead}},
      {"c *:* m", true, {DeviceType::kChar, kAnyNumber, kAnyNumber, kAccessMknod}},
      {"c 1:3 mwr", true, {DeviceType::kChar, 1, 3, kAccessAll}},
      {"c 1:3 rw\n", true, {DeviceType::kChar, 1, 3, kAccessReadWrite}},
      {"a", true, {DeviceType::kAll, kAnyNumber, kAnyNumber, kAccessAll}},
      {"a *:* rwm", true, {DeviceType::kAll, kAnyNumber, kAnyNumber, kAccessAll}},
      {"a 1:2 r", true, {DeviceType::kAll, kAnyNumber, kAnyNumber, kAccessAll}},  // kernel ignores the rest
      {"", false, {}},
      {"x 1:3 rw", false, {}},
      {"c1:3 rw", false, {}},
      {"c 1 rw", false, {}},
      {"c 1:3", false, {}},
      {"c 1:3 ", false, {}},
      {"c 1:3 rx", false, {}},
      {"c 1:3 rwmr", false, {}},
      {"c -1:3 rw", false, {}},
      {"c 4294967295:0 rw", false, {}},
      {"c 1234567890123:0 rw", false, {}},
      {"c :3 rw", false, {}},
  };
  for (const auto& c : cases) {
    auto r = parse_device_rule(c.text);
    EXPECT_EQ(r.ok(), c.ok) << "'" << c.text << "'";
    if (r.ok() && c.ok) {
      EXPECT_EQ(*r, c.rule) << "'" << c.text << "'";
    }
    if (!r.ok()) {
      EXPECT_FALSE(r.error().message.empty());
    }
  }
}

TEST(DeviceRule, FormatsAsDevicesListShows) {
  EXPECT_EQ(format_device_rule({DeviceType::kChar, 195, 0, kAccessReadWrite}), "c 195:0 rw");
  EXPECT_EQ(format_device_rule({DeviceType::kBlock, kAnyNumber, kAnyNumber, kAccessMknod}), "b *:* m");
  EXPECT_EQ(format_device_rule(DeviceRule{}), "a *:* rwm");
  for (const char* text : {"c 195:0 rw", "c 10:200 rwm", "b *:* m", "c 136:* rw", "a *:* rwm"}) {
    EXPECT_EQ(format_device_rule(*parse_device_rule(text)), text);
  }
}

struct AllowCase {
  const char* list;
  DeviceNumber dev;
  std::uint8_t access;
  bool allowed;
};

TEST(DeviceList, EvaluatesLikeTheKernel) {
  const DeviceNumber gpu0{DeviceType::kChar, 195, 0};
  const DeviceNumber uvm{DeviceType::kChar, 237, 0};
  const DeviceNumber blk{DeviceType::kBlock, 195, 0};
  const AllowCase cases[] = {
      // default-allow cgroup
      {"a *:* rwm\n", gpu0, kAccessReadWrite, true},
      {"a *:* rwm\n", blk, kAccessAll, true},
      // empty default-deny cgroup
      {"", gpu0, kAccessRead, false},
      // exact exception
      {"c 195:0 rw\n", gpu0, kAccessReadWrite, true},
      {"c 195:0 rw\n", gpu0, kAccessRead, true},
      {"c 195:0 rw\n", gpu0, kAccessAll, false},  // mknod not covered
      {"c 195:0 r\n", gpu0, kAccessReadWrite, false},
      {"c 195:1 rw\n", gpu0, kAccessReadWrite, false},
      // wildcards
      {"c 195:* rw\n", gpu0, kAccessReadWrite, true},
      {"c *:* rwm\n", uvm, kAccessReadWrite, true},
      {"c *:0 rw\n", uvm, kAccessReadWrite, true},
      {"c *:* m\nb *:* m\n", gpu0, kAccessReadWrite, false},  // runc's default mknod-only rules
      // type must match
      {"b 195:0 rwm\n", gpu0, kAccessRead, false},
      {"c 195:0 rwm\n", blk, kAccessRead, false},
      // one exception must cover the whole access: split r and w do not add up
      {"c 195:0 r\nc 195:0 w\n", gpu0, kAccessReadWrite, false},
      {"c 195:0 r\nc 195:* rw\n", gpu0, kAccessReadWrite, true},
      // a typical runc container
      {"c 1:3 rwm\nc 1:5 rwm\nc 1:7 rwm\nc 5:0 rwm\nc 5:2 rwm\nc 136:* rwm\nc *:* m\nb *:* m\n", uvm, kAccessRead,
       false},
  };
  for (const auto& c : cases) {
    auto list = parse_devices_list(c.list);
    ASSERT_TRUE(list.ok()) << c.list;
    EXPECT_EQ(device_list_allows(*list, c.dev, c.access), c.allowed)
        << "list:\n" << c.list << "dev " << format_device_number(c.dev) << " access " << format_access(c.access);
  }
}

TEST(DeviceList, RejectsGarbageWithTheLine) {
  auto r = parse_devices_list("c 1:3 rwm\nbogus\n");
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.error().message.find("line 2"), std::string::npos) << r.error().message;
}

TEST(DeviceList, AllowAllWinsOverStrayLines) {
  auto r = parse_devices_list("a *:* rwm\nc 1:3 r\n");
  ASSERT_TRUE(r.ok());
  EXPECT_TRUE(r->allow_all);
  EXPECT_TRUE(r->exceptions.empty());
}

}  // namespace
}  // namespace gdw
