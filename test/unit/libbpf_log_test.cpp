// How a failed probe load is explained from libbpf's log (lines as libbpf 1.1 prints them).
#include "probe/libbpf_log.h"

#include <gtest/gtest.h>

namespace gdw {
namespace {

TEST(LibbpfLog, VerifierRejectionNamesTheProgramAndTheReason) {
  std::vector<std::string> lines = {
      "libbpf: prog 'syscall_enter': BPF program load failed: Permission denied",
      "libbpf: prog 'syscall_enter': -- BEGIN PROG LOAD LOG --",
      "0: R1=ctx() R10=fp0",
      "1: (79) r6 = *(u64 *)(r1 +0)",
      "2: (b7) r1 = 0",
      "3: (63) *(u32 *)(r10 -4) = r1",
      "41: (79) r3 = *(u64 *)(r1 +24)",
      "44: (85) call bpf_probe_read_user#112",
      "R2 min value is negative, either use unsigned or 'var &= const'",
      "processed 1168 insns (limit 1000000) max_states_per_insn 1 total_states 82",
      "-- END PROG LOAD LOG --",
      "libbpf: prog 'syscall_enter': failed to load: -13",
      "libbpf: failed to load object 'devwatch'",
  };
  auto explained = explain_libbpf_failure(lines);
  ASSERT_TRUE(explained);
  EXPECT_NE(explained->find("verifier rejected program 'syscall_enter'"), std::string::npos) << *explained;
  EXPECT_NE(explained->find("R2 min value is negative"), std::string::npos) << *explained;
  EXPECT_EQ(explained->find("0: R1=ctx()"), std::string::npos) << "only the last lines are quoted";
}

TEST(LibbpfLog, MissingTracepoint) {
  std::vector<std::string> lines = {
      "libbpf: prog 'cgroup_mkdir': failed to find kernel BTF type ID of 'cgroup_mkdir': -3",
      "libbpf: prog 'cgroup_mkdir': failed to prepare load attributes: -3",
  };
  auto explained = explain_libbpf_failure(lines);
  ASSERT_TRUE(explained);
  EXPECT_NE(explained->find("no tracepoint 'cgroup_mkdir'"), std::string::npos) << *explained;
}

TEST(LibbpfLog, OtherFailuresAreNotExplained) {
  EXPECT_FALSE(explain_libbpf_failure({"libbpf: map 'events': failed to create: Operation not permitted(-1)"}));
  EXPECT_FALSE(explain_libbpf_failure({}));
}

}  // namespace
}  // namespace gdw
