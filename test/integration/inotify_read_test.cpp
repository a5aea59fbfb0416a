// The daemon's inotify reads (watch/inotify.h) on this machine's kernel: a queue larger
// than one read's buffer comes back whole, nothing is lost or repeated, and a drained
// queue reads as empty.
#include <gtest/gtest.h>

#include <set>
#include <string>

#include "support/temp_dir.h"
#include "watch/inotify.h"

namespace gdw {
namespace {

TEST(InotifyRead, AQueueLargerThanOneReadComesBackWhole) {
  test::TempDir tmp;
  auto inotify = Inotify::create();
  ASSERT_TRUE(inotify) << inotify.error().message;
  auto wd = inotify->add(tmp.path(), IN_CREATE);
  ASSERT_TRUE(wd) << wd.error().message;
  // 1000 events of about 220 bytes each: over three 64 KiB reads.
  std::set<std::string> created;
  for (int i = 0; i < 1000; ++i) {
    const std::string name = std::to_string(i) + "-" + std::string(200, 'x');
    test::write_file(tmp / name, "");
    created.insert(name);
  }
  auto events = inotify->read_queued();
  ASSERT_TRUE(events) << events.error().message;
  std::set<std::string> seen;
  for (const auto& ev : *events) {
    EXPECT_EQ(ev.wd, *wd);
    EXPECT_TRUE(ev.mask & IN_CREATE);
    EXPECT_TRUE(seen.insert(ev.name).second) << "twice: " << ev.name;
  }
  EXPECT_EQ(seen, created);

  auto again = inotify->read_queued();
  ASSERT_TRUE(again) << again.error().message;
  EXPECT_TRUE(again->empty());
}

TEST(InotifyRead, ASmallQueueComesBackInOneCallAndLaterEventsInTheNext) {
  test::TempDir tmp;
  auto inotify = Inotify::create();
  ASSERT_TRUE(inotify) << inotify.error().message;
  ASSERT_TRUE(inotify->add(tmp.path(), IN_CREATE));
  test::write_file(tmp / "a", "");
  test::write_file(tmp / "b", "");
  auto first = inotify->read_queued();
  ASSERT_TRUE(first) << first.error().message;
  ASSERT_EQ(first->size(), 2u);
  EXPECT_EQ((*first)[0].name, "a");
  EXPECT_EQ((*first)[1].name, "b");
  test::write_file(tmp / "c", "");
  auto second = inotify->read_queued();
  ASSERT_TRUE(second) << second.error().message;
  ASSERT_EQ(second->size(), 1u);
  EXPECT_EQ((*second)[0].name, "c");
}

}  // namespace
}  // namespace gdw
