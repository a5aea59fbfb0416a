// The kept devices.list / devices.allow descriptors (backend/devices_v1_files.h) on real
// cgroup v1 devices cgroups: what a repair reads and writes is always the cgroup now at
// the path, never a removed one's, and plain files are never kept.
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>

#include <cerrno>
#include <fstream>

#include "backend/devices_v1_files.h"
#include "core/repair_plan.h"
#include "support/cgroup_sandbox.h"
#include "support/temp_dir.h"

namespace gdw {
namespace {

using test::CgroupSandbox;

const DeviceRule kGpu0{DeviceType::kChar, 195, 0, kAccessReadWrite};

class DevicesV1FilesTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!CgroupSandbox::available("devices")) GTEST_SKIP() << "needs root and the v1 devices hierarchy";
    sandbox_.emplace("devices", "v1files");
    dir_ = sandbox_->make("c");
    ASSERT_EQ(sandbox_->deny("c", "a"), 0);
  }

  bool lists_gpu0(const std::string& text) { return text.find("c 195:0 rw") != std::string::npos; }

  std::optional<CgroupSandbox> sandbox_;
  std::string dir_;
};

TEST_F(DevicesV1FilesTest, KeptDescriptorsSeeEveryChangeOfTheCgroup) {
  DevicesV1Files files(8);
  auto before = files.read_list(dir_);
  ASSERT_TRUE(before) << before.error().message;
  EXPECT_FALSE(lists_gpu0(*before));
  EXPECT_EQ(files.open_files(), 2u) << "devices.allow is opened with the first look";
  auto granted = files.write_grants(dir_, {kGpu0});
  ASSERT_EQ(granted.size(), 1u);
  EXPECT_TRUE(granted[0].ok()) << granted[0].error().message;
  EXPECT_EQ(files.open_files(), 2u) << "devices.list and devices.allow are kept";
  auto after = files.read_list(dir_);
  ASSERT_TRUE(after);
  EXPECT_TRUE(lists_gpu0(*after)) << *after;
  EXPECT_EQ(*after, sandbox_->devices_list("c")) << "a re-read restarts at offset 0";
  ASSERT_EQ(sandbox_->deny("c", "c 195:0 rwm"), 0);  // someone else revokes
  EXPECT_FALSE(lists_gpu0(*files.read_list(dir_)));
}

TEST_F(DevicesV1FilesTest, AListLongerThanOneReadIsReadWhole) {
  // 2000 exceptions: ~26 KiB of devices.list, more than one read takes.
  for (unsigned minor = 0; minor < 2000; ++minor)
    ASSERT_EQ(sandbox_->allow("c", "c 240:" + std::to_string(minor) + " rwm"), 0);
  DevicesV1Files files(8);
  for (int pass = 0; pass < 2; ++pass) {  // opened, then kept
    auto text = files.read_list(dir_);
    ASSERT_TRUE(text);
    EXPECT_GT(text->size(), 16384u);
    EXPECT_EQ(*text, sandbox_->devices_list("c"));
  }
}

TEST_F(DevicesV1FilesTest, ARemovedCgroupIsGoneAndOneMadeAgainAtThePathIsReadAfresh) {
  DevicesV1Files files(8);
  ASSERT_TRUE(files.write_grants(dir_, {kGpu0})[0].ok());
  ASSERT_TRUE(lists_gpu0(*files.read_list(dir_)));
  sandbox_->remove("c");
  auto gone = files.read_list(dir_);
  ASSERT_FALSE(gone);
  EXPECT_TRUE(is_cgroup_gone(gone.error())) << gone.error().message;
  auto refused = files.write_grants(dir_, {kGpu0});
  ASSERT_EQ(refused.size(), 1u);
  ASSERT_FALSE(refused[0].ok());
  EXPECT_TRUE(is_cgroup_gone(refused[0].error())) << refused[0].error().message;
  EXPECT_EQ(files.open_files(), 0u);

  // Re-created with the same path: a new cgroup that was never granted anything.
  sandbox_->make("c");
  ASSERT_EQ(sandbox_->deny("c", "a"), 0);
  ASSERT_TRUE(files.write_grants(dir_, {kGpu0})[0].ok());
  ASSERT_TRUE(lists_gpu0(*files.read_list(dir_)));  // keeps the new cgroup's descriptors
  sandbox_->remove("c");
  sandbox_->make("c");
  ASSERT_EQ(sandbox_->deny("c", "a"), 0);
  auto fresh = files.read_list(dir_);
  ASSERT_TRUE(fresh) << fresh.error().message;
  EXPECT_FALSE(lists_gpu0(*fresh)) << "read from the removed cgroup's descriptor: " << *fresh;
  ASSERT_TRUE(files.write_grants(dir_, {kGpu0})[0].ok());
  EXPECT_TRUE(lists_gpu0(sandbox_->devices_list("c"))) << "the grant reached the new cgroup";
}

TEST_F(DevicesV1FilesTest, ForgetClosesAndTheLimitIsKept) {
  DevicesV1Files files(1);
  const std::string other = sandbox_->make("d");
  ASSERT_EQ(sandbox_->deny("d", "a"), 0);
  ASSERT_TRUE(files.read_list(dir_));
  ASSERT_TRUE(files.read_list(other));
  EXPECT_EQ(files.open_files(), 2u) << "only one cgroup's files kept (both of them)";
  ASSERT_TRUE(files.write_grants(other, {kGpu0})[0].ok()) << "beyond the limit: opened per call";
  EXPECT_TRUE(lists_gpu0(*files.read_list(other)));
  files.forget(dir_);
  EXPECT_EQ(files.open_files(), 0u);
}

TEST(DevicesV1FilesPlain, PlainFilesAreOpenedEachTimeSoAReplacedFileIsRead) {
  test::TempDir tmp;
  const std::string dir = tmp.path();
  { std::ofstream(dir + "/devices.list") << "c 195:0 rw\n"; }
  DevicesV1Files files(8);
  ASSERT_TRUE(files.read_list(dir));
  EXPECT_EQ(files.open_files(), 0u);
  { std::ofstream(dir + "/devices.list.new") << "a *:* rwm\n"; }
  ASSERT_EQ(::rename((dir + "/devices.list.new").c_str(), (dir + "/devices.list").c_str()), 0);
  EXPECT_EQ(*files.read_list(dir), "a *:* rwm\n");
}

}  // namespace
}  // namespace gdw
