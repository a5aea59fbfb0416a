// The attrs of the cgroup-bpf calls a v2 repair makes (backend/cgroup_bpf_calls.h), read
// back byte by byte: the fields Linux 6.17 added (the query's revision, an attach's or
// detach's expected_revision) at upstream's offsets, in a whole zeroed attr.
#include "backend/cgroup_bpf_calls.h"

#include <gtest/gtest.h>
#include <linux/bpf.h>

#include <cstdint>

namespace gdw::cgroup_bpf {
namespace {

// Every byte zero outside [from, to).
bool zero_outside(const Attr& a, std::size_t from, std::size_t to) {
  for (std::size_t i = 0; i < a.bytes.size(); ++i)
    if ((i < from || i >= to) && a.bytes[i] != 0) return false;
  return true;
}

TEST(CgroupBpfCalls, AnAttachCarriesTheExpectedRevisionAfterTheReplacedProgram) {
  const Attr a = attach_attr(7, 9, BPF_F_ALLOW_MULTI | BPF_F_REPLACE, 11, 0x1122334455667788ull);
  EXPECT_EQ(a.get32(0), 7u);                    // target_fd
  EXPECT_EQ(a.get32(4), 9u);                    // attach_bpf_fd
  EXPECT_EQ(a.get32(8), BPF_CGROUP_DEVICE);     // attach_type
  EXPECT_EQ(a.get32(12), BPF_F_ALLOW_MULTI | BPF_F_REPLACE);
  EXPECT_EQ(a.get32(16), 11u);                  // replace_bpf_fd
  EXPECT_EQ(a.get32(20), 0u);                   // relative_fd: not used
  EXPECT_EQ(a.get64(24), 0x1122334455667788ull);  // expected_revision
  EXPECT_TRUE(zero_outside(a, 0, 32));
}

TEST(CgroupBpfCalls, WithoutARevisionTheAttachIsWhatAnOlderKernelAccepts) {
  // A kernel before 6.17 refuses (EINVAL) an attach with any byte set past replace_bpf_fd.
  const Attr a = attach_attr(3, 4, BPF_F_ALLOW_MULTI, -1, 0);
  EXPECT_EQ(a.get32(16), 0u) << "no program to replace";
  EXPECT_TRUE(zero_outside(a, 0, 16));
}

TEST(CgroupBpfCalls, ADetachCarriesItsRevisionToo) {
  const Attr a = detach_attr(3, 4, 42);
  EXPECT_EQ(a.get32(0), 3u);
  EXPECT_EQ(a.get32(4), 4u);
  EXPECT_EQ(a.get32(8), BPF_CGROUP_DEVICE);
  EXPECT_EQ(a.get32(12), 0u);
  EXPECT_EQ(a.get64(24), 42u);
  EXPECT_TRUE(zero_outside(a, 0, 32));
}

TEST(CgroupBpfCalls, AQueryLeavesRoomForTheRevisionTheKernelWrites) {
  std::uint32_t ids[4];
  const Attr a = query_attr(5, ids, 4);
  EXPECT_EQ(a.get32(0), 5u);
  EXPECT_EQ(a.get32(4), BPF_CGROUP_DEVICE);
  EXPECT_EQ(a.get32(8), 0u) << "no BPF_F_QUERY_EFFECTIVE: the programs attached to the cgroup itself";
  EXPECT_EQ(a.get64(16), reinterpret_cast<std::uintptr_t>(ids));
  EXPECT_EQ(a.get32(24), 4u);
  EXPECT_EQ(a.get64(56), 0u) << "revision: 0 until a kernel that keeps one writes it";
  EXPECT_TRUE(zero_outside(a, 0, 28));
  EXPECT_GE(a.bytes.size(), sizeof(union bpf_attr));
  EXPECT_GE(a.bytes.size(), query_at::kRevision + 8);
}

}  // namespace
}  // namespace gdw::cgroup_bpf
