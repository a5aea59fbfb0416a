// The wrapper cache of cgroup v2 repairs (backend/device_program_cache): copies of a
// wrapper and when they may be attached again, the spare copy loaded after a repair so
// that the next one runs no verifier, and the wrappers loaded ahead for the other
// containers' device sets. Real BPF_PROG_LOADs; no cgroup is touched.
#include "backend/device_program_cache.h"

#include <bpf/bpf.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <thread>
#include <memory>
#include <cstring>
#include <set>
#include <vector>

#include "runtime/oci_config.h"
#include "support/foreign_device_program.h"

namespace gdw::test {
namespace {

const OciDeviceCgroupRule kDenyAll{false, DeviceRule{DeviceType::kAll, kAnyNumber, kAnyNumber, kAccessAll}};
// A container's spec: deny everything, then /dev/null.
const std::vector<OciDeviceCgroupRule> kSpec{kDenyAll, {true, DeviceRule{DeviceType::kChar, 1, 3, kAccessAll}}};

WantedDevice wanted(std::uint32_t major, std::uint32_t minor, std::uint8_t access, const std::string& name) {
  return WantedDevice{{DeviceType::kChar, major, minor}, access, name, "test"};
}

class DeviceProgramCacheTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (::geteuid() != 0) GTEST_SKIP() << "needs root (BPF_PROG_LOAD)";
    ForeignProgram probe("", {kDenyAll});
    if (probe.fd < 0)
      GTEST_SKIP() << "BPF_PROG_LOAD of a cgroup device program refused: " << std::strerror(probe.load_errno);
    spec_ = std::make_unique<ForeignProgram>("", kSpec);
    ASSERT_GE(spec_->fd, 0) << std::strerror(spec_->load_errno);
    auto described = cache.describe(spec_->id);
    ASSERT_TRUE(described.has_value());
    inner = described->code;
  }
  // A wrapper of the spec's program adding the GPU, for cgroup `dir` at `at`.
  Result<DeviceProgramCache::Wrapper> wrapper(const std::string& dir, Clock::time_point at) {
    return cache.wrapper(desired, inner, dir, spec_->id, at);
  }

  // Whether the load thread's wrappers were taken in until `n` were loaded off the loop (5 s).
  bool adopted(std::size_t n) {
    for (int i = 0; i < 5000 && cache.off_loop_loads() < n; ++i) {
      cache.adopt_off_loop();
      if (cache.off_loop_loads() < n) std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
    return cache.off_loop_loads() == n;
  }

  DeviceProgramCache cache;
  const std::vector<WantedDevice> desired{wanted(195, 0, kAccessReadWrite, "nvidia0")};
  std::unique_ptr<ForeignProgram> spec_;
  BpfCode inner;
  const Clock::time_point t0 = Clock::now();
};

// A grant from a look at one program (observe_attached) has not queried the cgroup: the
// copies its last query found there are taken as still attached, however long ago that was.
TEST_F(DeviceProgramCacheTest, ACopyTheLastQueryFoundIsNotHandedOutAgainThereWithoutAQuery) {
  auto first = wrapper("/a", t0);
  ASSERT_TRUE(first.ok()) << first.error().message;
  const std::uint32_t in_a = first->id;
  cache.seen_attached("/a", {in_a, 999999}, t0);
  const auto much_later = t0 + 3 * DeviceProgramCache::kReuseAfter;
  cache.assume_still_attached("/a", much_later);
  auto again = wrapper("/a", much_later);
  ASSERT_TRUE(again.ok()) << again.error().message;
  EXPECT_NE(again->id, in_a) << "the last query of /a found it there";
  auto elsewhere = wrapper("/b", much_later);
  ASSERT_TRUE(elsewhere.ok());
  EXPECT_EQ(elsewhere->id, in_a) << "no query found it in /b";
  // A later query that no longer finds it there frees it for /a after kReuseAfter.
  cache.seen_attached("/a", {again->id}, much_later);
  const auto after_that = much_later + 2 * DeviceProgramCache::kReuseAfter;
  cache.assume_still_attached("/a", after_that);
  auto freed = wrapper("/a", after_that);
  ASSERT_TRUE(freed.ok());
  EXPECT_EQ(freed->id, in_a);
  // A cgroup forgotten leaves nothing to assume.
  cache.forget_cgroup("/a");
  const auto last = after_that + 2 * DeviceProgramCache::kReuseAfter;
  cache.assume_still_attached("/a", last);
  auto after_forget = wrapper("/a", last);
  ASSERT_TRUE(after_forget.ok());
  EXPECT_EQ(after_forget->id, in_a);
}

TEST_F(DeviceProgramCacheTest, WrapperCopiesAreReusedOnlyAfterTheirTimeAndStayBounded) {
  std::vector<std::uint32_t> ids;
  for (std::size_t i = 0; i < DeviceProgramCache::kMaxCopies; ++i) {
    auto w = wrapper("/a", t0);
    ASSERT_TRUE(w.ok()) << w.error().message;
    EXPECT_EQ(std::count(ids.begin(), ids.end(), w->id), 0) << "copy " << i << " was handed to /a already";
    EXPECT_EQ(w->owned.use_count(), 0) << "kept by the cache";
    ids.push_back(w->id);
  }
  EXPECT_EQ(cache.wrapper_loads(), DeviceProgramCache::kMaxCopies);
  auto past = wrapper("/a", t0);
  ASSERT_TRUE(past.ok()) << past.error().message;
  EXPECT_EQ(past->owned.use_count(), 1) << "a copy past kMaxCopies is not kept: the caller owns it";
  EXPECT_EQ(std::count(ids.begin(), ids.end(), past->id), 0);

  auto other = wrapper("/b", t0);
  ASSERT_TRUE(other.ok());
  EXPECT_EQ(other->id, ids[0]) << "another cgroup shares the first copy";
  // Seen attached in /a again just now: not reused there until kReuseAfter after that.
  cache.seen_attached("/a", {ids[0]}, t0 + DeviceProgramCache::kReuseAfter / 2);
  auto later = wrapper("/a", t0 + DeviceProgramCache::kReuseAfter);
  ASSERT_TRUE(later.ok());
  EXPECT_EQ(later->id, ids[1]) << "the first copy was seen in /a too lately";
  EXPECT_EQ(cache.wrapper_loads(), DeviceProgramCache::kMaxCopies + 1) << "no verifier run for a reused copy";
}

// Containers come and go for months: the cgroups a copy was handed to are forgotten once
// older than kReuseAfter, without a walk of them on every repair's path.
TEST_F(DeviceProgramCacheTest, TheCgroupsACopyWasHandedToDoNotPileUp) {
  for (int i = 0; i < 200; ++i) ASSERT_TRUE(wrapper("/gone/" + std::to_string(i), t0).ok());
  EXPECT_EQ(cache.wrapper_loads(), 1u) << "one copy serves every other cgroup";
  EXPECT_EQ(cache.cgroups_remembered(), 200u) << "all within kReuseAfter: none may be forgotten";
  const auto later = t0 + DeviceProgramCache::kReuseAfter;
  for (int i = 0; i < 200; ++i) ASSERT_TRUE(wrapper("/new/" + std::to_string(i), later).ok());
  EXPECT_EQ(cache.wrapper_loads(), 1u);
  EXPECT_LT(cache.cgroups_remembered(), 250u) << "the 200 gone ones were forgotten on the way";
  EXPECT_GE(cache.cgroups_remembered(), 150u) << "the new ones are not";
  // A cgroup forgotten that way gets the copy again at once.
  auto again = wrapper("/gone/0", later);
  ASSERT_TRUE(again.ok());
  EXPECT_EQ(cache.wrapper_loads(), 1u);
}

TEST_F(DeviceProgramCacheTest, ASpareCopyIsLoadedAfterARepairSoTheNextOneRunsNoVerifier) {
  auto first = wrapper("/a", t0);
  ASSERT_TRUE(first.ok()) << first.error().message;
  EXPECT_EQ(cache.wrapper_loads(), 1u);
  EXPECT_EQ(cache.load_spares(t0), 1u) << "the only copy is in /a: a spare is due";
  EXPECT_EQ(cache.load_spares(t0), 0u) << "loaded once";
  // /a re-applied while its copy is attached there: the spare, no verifier run now.
  cache.seen_attached("/a", {first->id}, t0);
  auto second = wrapper("/a", t0);
  ASSERT_TRUE(second.ok()) << second.error().message;
  EXPECT_NE(second->id, first->id);
  EXPECT_EQ(second->owned.use_count(), 0) << "the spare is the cache's";
  EXPECT_EQ(cache.wrapper_loads(), 2u) << "the repair itself ran no verifier";
  // Both copies are now seen in /a: the next spare is due, and so on up to kMaxCopies.
  EXPECT_EQ(cache.load_spares(t0), 1u);
  // /a re-applied on and on: the kept copies stop at kMaxCopies; past those each repair
  // takes a one-shot copy loaded after the one before. None runs the verifier itself.
  std::set<std::uint32_t> kept{first->id, second->id};
  std::size_t one_shots = 0;
  for (int i = 0; i < 3 * static_cast<int>(DeviceProgramCache::kMaxCopies); ++i) {
    const std::size_t loads = cache.wrapper_loads();
    auto w = wrapper("/a", t0);
    ASSERT_TRUE(w.ok()) << w.error().message;
    EXPECT_EQ(cache.wrapper_loads(), loads) << "re-apply " << i << " loaded its copy on its repair's path";
    if (w->owned.use_count() > 0) ++one_shots;  // owned: a null pointer with its deleter
    else kept.insert(w->id);
    cache.load_spares(t0);
  }
  EXPECT_EQ(kept.size(), DeviceProgramCache::kMaxCopies) << "kept copies stop at kMaxCopies";
  EXPECT_EQ(one_shots, 3 * DeviceProgramCache::kMaxCopies - (DeviceProgramCache::kMaxCopies - 2));
}

// A cgroup re-applied more often than kMaxCopies per kReuseAfter: the copy its next repair
// needs is loaded after this one, used once by whichever cgroup has no kept copy free, and
// not kept (the kernel frees it once it is detached).
TEST_F(DeviceProgramCacheTest, PastKMaxCopiesTheNextOneShotCopyIsLoadedAhead) {
  std::vector<std::uint32_t> ids;
  for (std::size_t i = 0; i < DeviceProgramCache::kMaxCopies; ++i) {
    auto w = wrapper("/a", t0);
    ASSERT_TRUE(w.ok()) << w.error().message;
    ids.push_back(w->id);
  }
  EXPECT_EQ(cache.load_spares(t0), 1u) << "every kept copy was in /a just now: a one-shot one is due";
  EXPECT_EQ(cache.load_spares(t0), 0u);
  const std::size_t loads = cache.wrapper_loads();
  auto other = wrapper("/b", t0);
  ASSERT_TRUE(other.ok());
  EXPECT_EQ(other->id, ids[0]) << "a cgroup with a kept copy free takes that one";
  EXPECT_EQ(other->owned.use_count(), 0) << "kept by the cache";

  std::uint32_t one_shot_id = 0;
  {
    auto again = wrapper("/a", t0);
    ASSERT_TRUE(again.ok()) << again.error().message;
    EXPECT_EQ(cache.wrapper_loads(), loads) << "no verifier run on /a's repair";
    EXPECT_EQ(again->owned.use_count(), 1) << "not kept: the caller owns it";
    EXPECT_EQ(std::count(ids.begin(), ids.end(), again->id), 0);
    one_shot_id = again->id;
  }
  const int gone = bpf_prog_get_fd_by_id(one_shot_id);
  if (gone >= 0) ::close(gone);
  EXPECT_LT(gone, 0) << "the one-shot copy, never attached, is still loaded";
  EXPECT_EQ(cache.load_spares(t0), 1u) << "/a may be re-applied again: the next one-shot copy";
  ASSERT_TRUE(wrapper("/c", t0).ok());
  EXPECT_EQ(cache.load_spares(t0), 0u) << "one at most per wrapper";

  // kReuseAfter later the kept copies are free in /a again: it takes one of them.
  auto later = wrapper("/a", t0 + DeviceProgramCache::kReuseAfter);
  ASSERT_TRUE(later.ok());
  EXPECT_EQ(later->owned.use_count(), 0) << "kept by the cache";
  EXPECT_EQ(std::count(ids.begin(), ids.end(), later->id), 1);
}

// A runtime's spec-only program met for the first time by a repair: the wrappers of that
// program for the other device sets the node's containers want are loaded after it, one
// per call, so that those containers' repairs run no verifier.
TEST_F(DeviceProgramCacheTest, WrappersForTheOtherContainersSetsAreLoadedAheadOnePerCall) {
  const std::vector<WantedDevice> gpu1{wanted(195, 1, kAccessReadWrite, "nvidia1")};
  const std::vector<WantedDevice> gpu2{wanted(195, 2, kAccessReadWrite, "nvidia2")};
  cache.wanted_sets().want("/a", desired);
  cache.wanted_sets().want("/b", gpu1);
  cache.wanted_sets().want("/c", gpu2);
  cache.wanted_sets().want("/gone", {wanted(195, 3, kAccessReadWrite, "nvidia3")});
  cache.wanted_sets().forget("/gone");

  auto first = wrapper("/a", t0);
  ASSERT_TRUE(first.ok()) << first.error().message;
  EXPECT_EQ(cache.wrapper_loads(), 1u) << "the first repair that meets the program loads on its path";
  EXPECT_EQ(cache.ahead_due(), 0u) << "decided after the grant, not on the repair's path";
  ASSERT_TRUE(cache.spares_due());
  // The spare copy of /a's wrapper and one wrapper ahead; then the other one: /b's and
  // /c's sets, not /a's (loaded), not the gone container's.
  EXPECT_EQ(cache.load_spares(t0), 2u);
  EXPECT_EQ(cache.ahead_due(), 1u);
  EXPECT_EQ(cache.load_spares(t0), 1u);
  EXPECT_FALSE(cache.spares_due());
  EXPECT_EQ(cache.load_spares(t0), 0u);
  const std::size_t loads = cache.wrapper_loads();
  EXPECT_EQ(loads, 4u);

  // /b and /c re-applied (by names the runtime gives: the key is the numbers and access).
  auto b = cache.wrapper(gpu1, inner, "/b", spec_->id, t0);
  auto c = cache.wrapper(gpu2, inner, "/c", spec_->id, t0);
  ASSERT_TRUE(b.ok() && c.ok());
  EXPECT_EQ(cache.wrapper_loads(), loads) << "no verifier run on their repairs";
  EXPECT_NE(b->id, c->id);
  EXPECT_NE(b->id, first->id);
  // Each is the wrapper of its own set: the program it runs adds that set and no other.
  for (const auto& [w, set] : {std::pair{&*b, &gpu1}, std::pair{&*c, &gpu2}}) {
    auto described = cache.describe(w->id);
    ASSERT_TRUE(described.has_value());
    ASSERT_TRUE(described->wrapper) << "program " << w->id;
    ASSERT_EQ(described->added.size(), 1u);
    EXPECT_EQ(described->added[0].dev, (*set)[0].dev);
    EXPECT_EQ(described->added[0].access, (*set)[0].access);
  }
}

TEST_F(DeviceProgramCacheTest, WhatIsLoadedAheadIsBounded) {
  for (std::uint32_t i = 0; i < 3 * DeviceProgramCache::kMaxAhead; ++i)
    cache.wanted_sets().want("/c" + std::to_string(i), {wanted(195, 100 + i, kAccessReadWrite, "gpu")});
  ASSERT_TRUE(wrapper("/a", t0).ok());
  EXPECT_EQ(cache.load_spares(t0), 2u) << "/a's spare copy, one wrapper ahead";
  EXPECT_EQ(cache.ahead_due(), DeviceProgramCache::kMaxAhead - 1) << "per program met";
  // Another runtime program met: more are due, up to kMaxAheadDue in all.
  ForeignProgram other("", {kDenyAll, {true, DeviceRule{DeviceType::kChar, 1, 5, kAccessAll}}});
  ASSERT_GE(other.fd, 0);
  auto other_code = cache.describe(other.id);
  ASSERT_TRUE(other_code.has_value());
  ASSERT_TRUE(cache.wrapper(desired, other_code->code, "/a", other.id, t0).ok());
  ForeignProgram third("", {kDenyAll, {true, DeviceRule{DeviceType::kChar, 1, 7, kAccessAll}}});
  ASSERT_GE(third.fd, 0);
  auto third_code = cache.describe(third.id);
  ASSERT_TRUE(third_code.has_value());
  ASSERT_TRUE(cache.wrapper(desired, third_code->code, "/a", third.id, t0).ok());
  cache.load_spares(t0);
  EXPECT_EQ(cache.ahead_due(), DeviceProgramCache::kMaxAheadDue - 1) << "in all, one loaded";
}

// A program read from the kernel comes with its descriptor (a repair swaps through it,
// without a second lookup by id); the cache keeps none: a program its runtime detached and
// closed is freed, not held loaded by the daemon.
TEST_F(DeviceProgramCacheTest, ADescriptionCarriesItsProgramButTheCacheHoldsNoneLoaded) {
  auto runtime = std::make_unique<ForeignProgram>("", std::vector<OciDeviceCgroupRule>{kDenyAll});
  ASSERT_GE(runtime->fd, 0) << std::strerror(runtime->load_errno);
  const std::uint32_t id = runtime->id;
  auto read = cache.describe(id);
  ASSERT_TRUE(read.has_value());
  ASSERT_TRUE(read->fd) << "read from the kernel: with its descriptor";
  bpf_prog_info info{};
  std::uint32_t length = sizeof(info);
  ASSERT_EQ(bpf_obj_get_info_by_fd(*read->fd, &info, &length), 0) << std::strerror(errno);
  EXPECT_EQ(info.id, id);
  auto known = cache.describe(id);
  ASSERT_TRUE(known.has_value());
  EXPECT_FALSE(known->fd) << "from the cache: none";
  EXPECT_EQ(known->code.size(), read->code.size());

  read.reset();
  runtime.reset();  // the runtime closes its last descriptor
  const int fd = bpf_prog_get_fd_by_id(id);
  const int lookup_errno = errno;
  if (fd >= 0) ::close(fd);
  EXPECT_LT(fd, 0) << "program " << id << " is still loaded";
  EXPECT_EQ(lookup_errno, ENOENT);
}

// Loaded off the loop while a runtime applies: the grant after it takes that very wrapper,
// with no verifier run of its own.
TEST_F(DeviceProgramCacheTest, AWrapperLoadedOffTheLoopIsTheOneTheGrantTakes) {
  ASSERT_TRUE(cache.load_off_loop(desired, inner, t0));
  EXPECT_FALSE(cache.load_off_loop(desired, inner, t0)) << "on its way already: not twice";
  ASSERT_TRUE(adopted(1)) << "the load thread never handed it back";
  EXPECT_EQ(cache.wrappers(), 1u);
  EXPECT_FALSE(cache.load_off_loop(desired, inner, t0)) << "loaded already";
  auto taken = wrapper("/a", t0);
  ASSERT_TRUE(taken.ok()) << taken.error().message;
  EXPECT_EQ(cache.wrapper_loads(), 0u) << "the grant ran the verifier itself";
  EXPECT_EQ(cache.off_loop_loads(), 1u);
}

// A writer that attaches new programs again and again (a tenant's process named like a
// runtime may) gets kOffLoopBurst loads at once, then one per 10 ms.
TEST_F(DeviceProgramCacheTest, LoadsOffTheLoopAreBoundedInNumberAndRate) {
  const auto set = [](std::uint32_t minor) {
    return std::vector<WantedDevice>{wanted(195, minor, kAccessReadWrite, "nvidia" + std::to_string(minor))};
  };
  std::uint32_t minor = 0;
  for (; minor < DeviceProgramCache::kOffLoopBurst; ++minor) EXPECT_TRUE(cache.load_off_loop(set(minor), inner, t0));
  EXPECT_FALSE(cache.load_off_loop(set(minor), inner, t0)) << "past the burst";
  ASSERT_TRUE(adopted(DeviceProgramCache::kOffLoopBurst));
  EXPECT_FALSE(cache.load_off_loop(set(minor), inner, t0 + std::chrono::milliseconds(5)))
      << "the thread is idle again, but the burst is spent";
  EXPECT_TRUE(cache.load_off_loop(set(minor), inner, t0 + std::chrono::milliseconds(11))) << "one per 10 ms";
  EXPECT_FALSE(cache.load_off_loop(set(minor + 1), inner, t0 + std::chrono::milliseconds(12)));
  ASSERT_TRUE(adopted(DeviceProgramCache::kOffLoopBurst + 1));
}

}  // namespace
}  // namespace gdw::test
