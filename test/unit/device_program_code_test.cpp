// The interpreter that decides what an attached device program does, and our wrapper:
// compiled rule lists run as the rules say; a wrapper allows exactly the wanted devices and
// decides as the wrapped code for everything else; what the interpreter cannot follow is
// kUnknown, never a guess.
#include "backend/device_program_code.h"

#include <gtest/gtest.h>

#include "backend/device_programs_v2.h"

namespace gdw {
namespace {

struct Random {
  std::uint32_t seed;
  std::uint32_t operator()(std::uint32_t n) {
    seed = seed * 1103515245u + 12345u;
    return (seed >> 16) % n;
  }
};

std::vector<DeviceNumber> probe_devices() {
  std::vector<DeviceNumber> devs;
  for (DeviceType t : {DeviceType::kChar, DeviceType::kBlock})
    for (std::uint32_t major : {1u, 195u, 240u})
      for (std::uint32_t minor : {0u, 1u, 3u}) devs.push_back({t, major, minor});
  return devs;
}

std::vector<OciDeviceCgroupRule> random_rules(Random& next) {
  const DeviceType types[] = {DeviceType::kAll, DeviceType::kChar, DeviceType::kBlock};
  const std::uint32_t majors[] = {195, 1, 240, kAnyNumber};
  const std::uint32_t minors[] = {0, 1, 3, kAnyNumber};
  std::vector<OciDeviceCgroupRule> rules{{next(2) == 1, DeviceRule{}}};
  for (std::uint32_t i = 0, n = next(7); i < n; ++i)
    rules.push_back({next(2) == 1, DeviceRule{types[next(3)], majors[next(4)], minors[next(4)],
                                              static_cast<std::uint8_t>(1 + next(7))}});
  return rules;
}

Verdict expected(bool allow) { return allow ? Verdict::kAllow : Verdict::kDeny; }

TEST(DeviceProgramCode, CompiledRulesRunAsTheRulesSay) {
  Random next{7};
  for (int round = 0; round < 200; ++round) {
    auto rules = random_rules(next);
    auto code = compile_device_rules(rules);
    for (const auto& dev : probe_devices())
      for (std::uint8_t access = 1; access <= kAccessAll; ++access)
        ASSERT_EQ(run_device_program(code, dev, access), expected(oci_rules_allow(rules, dev, access)))
            << "round " << round << " " << dev.major << ":" << dev.minor << " access " << int(access);
  }
}

TEST(DeviceProgramCode, AWrapperAddsExactlyTheWantedDevicesAndKeepsEveryOtherVerdict) {
  Random next{99};
  for (int round = 0; round < 200; ++round) {
    auto rules = random_rules(next);
    std::vector<WantedDevice> wanted;
    for (std::uint32_t i = 0, n = next(4); i < n; ++i)
      wanted.push_back({{next(2) ? DeviceType::kChar : DeviceType::kBlock, next(2) ? 195u : 240u, next(4)},
                        static_cast<std::uint8_t>(1 + next(7)), "d", ""});
    auto code = wrap_device_program(wanted, compile_device_rules(rules));
    for (const auto& dev : probe_devices())
      for (std::uint8_t access = 1; access <= kAccessAll; ++access) {
        bool added = false;
        for (const auto& w : wanted) added |= w.dev == dev && (access & ~w.access) == 0;
        ASSERT_EQ(run_device_program(code, dev, access), expected(added || oci_rules_allow(rules, dev, access)))
            << "round " << round;
      }
  }
}

TEST(DeviceProgramCode, UnwrapGivesBackTheWantedSetAndTheWrappedCode) {
  const std::vector<WantedDevice> wanted{{{DeviceType::kChar, 195, 0}, kAccessReadWrite, "", ""},
                                         {{DeviceType::kBlock, 240, 1}, kAccessRead, "", ""}};
  const auto inner = compile_device_rules({{false, DeviceRule{}}});
  auto unwrapped = unwrap_device_program(wrap_device_program(wanted, inner));
  ASSERT_TRUE(unwrapped);
  EXPECT_EQ(unwrapped->added, wanted);
  ASSERT_EQ(unwrapped->inner.size(), inner.size());
  EXPECT_FALSE(unwrap_device_program(inner)) << "not a wrapper";
  auto tampered = wrap_device_program(wanted, inner);
  tampered[10].off = 1;  // a lookalike prologue is not ours
  EXPECT_FALSE(unwrap_device_program(tampered));
  EXPECT_FALSE(unwrap_device_program({}));
}

// runc's filter as its devicefilter package emits it: 32-bit ALU, the ctx register reused
// as scratch, register compares.
TEST(DeviceProgramCode, RunsRuncsInstructionShapes) {
  const BpfCode runc{
      insn(BPF_LDX | BPF_MEM | BPF_W, 2, 1, 0, 0),  insn(BPF_ALU | BPF_AND | BPF_K, 2, 0, 0, 0xffff),
      insn(BPF_LDX | BPF_MEM | BPF_W, 3, 1, 0, 0),  insn(BPF_ALU | BPF_RSH | BPF_K, 3, 0, 0, 16),
      insn(BPF_LDX | BPF_MEM | BPF_W, 4, 1, 4, 0),  insn(BPF_LDX | BPF_MEM | BPF_W, 5, 1, 8, 0),
      insn(BPF_JMP | BPF_JNE | BPF_K, 2, 0, 7, 2),  insn(BPF_ALU | BPF_MOV | BPF_X, 1, 3, 0, 0),
      insn(BPF_ALU | BPF_AND | BPF_K, 1, 0, 0, 7),  insn(BPF_JMP | BPF_JNE | BPF_X, 1, 3, 4, 0),
      insn(BPF_JMP | BPF_JNE | BPF_K, 4, 0, 3, 1),  insn(BPF_JMP | BPF_JNE | BPF_K, 5, 0, 2, 3),
      insn(BPF_ALU | BPF_MOV | BPF_K, 0, 0, 0, 1),  insn(BPF_JMP | BPF_EXIT, 0, 0, 0, 0),
      insn(BPF_ALU | BPF_MOV | BPF_K, 0, 0, 0, 0),  insn(BPF_JMP | BPF_EXIT, 0, 0, 0, 0),
  };
  EXPECT_EQ(program_allows(runc, {DeviceType::kChar, 1, 3}, kAccessAll), Verdict::kAllow);
  EXPECT_EQ(run_device_program(runc, {DeviceType::kChar, 1, 4}, kAccessRead), Verdict::kDeny);
  EXPECT_EQ(run_device_program(runc, {DeviceType::kBlock, 1, 3}, kAccessRead), Verdict::kDeny);
  EXPECT_FALSE(not_reloadable(runc));
}

// The shared instructions of a description answer as the instructions do, for every copy,
// the same question asked again, and past the answers they keep.
TEST(SharedBpfCode, AnswersAsTheInstructionsDoForEveryCopy) {
  const std::vector<OciDeviceCgroupRule> rules = {
      {false, DeviceRule{DeviceType::kAll, kAnyNumber, kAnyNumber, kAccessAll}},
      {true, DeviceRule{DeviceType::kChar, 195, kAnyNumber, kAccessReadWrite}},
      {false, DeviceRule{DeviceType::kChar, 195, 3, kAccessWrite}},
      {true, DeviceRule{DeviceType::kChar, 1, 3, kAccessAll}}};
  const BpfCode code = compile_device_rules(rules);
  const SharedBpfCode shared(code);
  const SharedBpfCode copy = shared;
  EXPECT_EQ(&copy.get(), &shared.get()) << "one buffer for both";
  int asked = 0;
  for (int round = 0; round < 2; ++round) {
    for (std::uint32_t minor = 0; minor < 40; ++minor) {  // 120 questions: more than it keeps
      for (std::uint8_t access : {kAccessRead, kAccessReadWrite, kAccessAll}) {
        const DeviceNumber dev{DeviceType::kChar, 195, minor};
        const SharedBpfCode& asker = (minor + round) % 2 ? copy : shared;
        ASSERT_EQ(asker.allows(dev, access), program_allows(code, dev, access)) << minor << " " << int(access);
        ++asked;
      }
    }
  }
  EXPECT_EQ(asked, 240);
  EXPECT_EQ(shared.allows({DeviceType::kChar, 195, 3}, kAccessReadWrite), Verdict::kDeny);
  EXPECT_EQ(shared.allows({DeviceType::kChar, 195, 3}, kAccessRead), Verdict::kAllow);
  EXPECT_EQ(SharedBpfCode().allows({DeviceType::kChar, 195, 0}, kAccessRead), Verdict::kUnknown) << "no instructions";
}

// A re-apply's new program carries the instructions of the last one: its description
// shares their buffer, and the verdicts already known; other instructions share nothing.
TEST(BpfCodeInterner, TheSameInstructionsShareOneBufferWhileADescriptionHoldsThem) {
  auto rules = [](std::uint32_t minor) {
    return compile_device_rules({{false, DeviceRule{DeviceType::kAll, kAnyNumber, kAnyNumber, kAccessAll}},
                                 {true, DeviceRule{DeviceType::kChar, 195, minor, kAccessReadWrite}}});
  };
  const DeviceNumber gpu0{DeviceType::kChar, 195, 0};
  BpfCodeInterner interner(3);
  SharedBpfCode first = interner.intern(SharedBpfCode(rules(0)));
  ASSERT_EQ(first.allows(gpu0, kAccessReadWrite), Verdict::kAllow);
  SharedBpfCode again = interner.intern(SharedBpfCode(rules(0)));  // read anew, same bytes
  EXPECT_EQ(&again.get(), &first.get()) << "one buffer";
  EXPECT_EQ(again.allows(gpu0, kAccessReadWrite), Verdict::kAllow);
  SharedBpfCode other = interner.intern(SharedBpfCode(rules(1)));
  EXPECT_NE(&other.get(), &first.get());
  EXPECT_EQ(other.allows(gpu0, kAccessReadWrite), Verdict::kDeny) << "its own verdicts";
  EXPECT_TRUE(interner.intern(SharedBpfCode()).empty());

  // Bounded: past `max` live entries, instructions are not shared (but still correct).
  SharedBpfCode third = interner.intern(SharedBpfCode(rules(2)));
  SharedBpfCode fourth = interner.intern(SharedBpfCode(rules(3)));
  SharedBpfCode fourth_again = interner.intern(SharedBpfCode(rules(3)));
  EXPECT_EQ(interner.size(), 3u);
  EXPECT_NE(&fourth_again.get(), &fourth.get());
  EXPECT_EQ(fourth_again.size(), rules(3).size()) << "its own copy";

  // It holds nothing: once no description holds a buffer, its entry makes room.
  first = SharedBpfCode();
  again = SharedBpfCode();
  SharedBpfCode fifth = interner.intern(SharedBpfCode(rules(4)));
  SharedBpfCode fifth_again = interner.intern(SharedBpfCode(rules(4)));
  EXPECT_EQ(&fifth_again.get(), &fifth.get()) << "the expired entry was dropped for it";
  EXPECT_EQ(interner.size(), 3u);
}

TEST(DeviceProgramCode, WhatItCannotFollowIsUnknownNotAGuess) {
  const bpf_insn exit0[] = {insn(BPF_ALU64 | BPF_MOV | BPF_K, 0, 0, 0, 0), insn(BPF_JMP | BPF_EXIT, 0, 0, 0, 0)};
  const DeviceNumber gpu{DeviceType::kChar, 195, 0};
  BpfCode call{insn(BPF_JMP | BPF_CALL, 0, 0, 0, 14), exit0[0], exit0[1]};
  EXPECT_EQ(run_device_program(call, gpu, kAccessRead), Verdict::kUnknown);
  EXPECT_TRUE(not_reloadable(call));
  BpfCode map{insn(BPF_LD | BPF_IMM | BPF_DW, 1, BPF_PSEUDO_MAP_VALUE, 0, 5), insn(0, 0, 0, 0, 0), exit0[0], exit0[1]};
  EXPECT_EQ(run_device_program(map, gpu, kAccessRead), Verdict::kUnknown);
  EXPECT_TRUE(not_reloadable(map));
  BpfCode stack{insn(BPF_ST | BPF_MEM | BPF_W, 10, 0, -4, 1), exit0[0], exit0[1]};
  EXPECT_EQ(run_device_program(stack, gpu, kAccessRead), Verdict::kUnknown);
  EXPECT_FALSE(not_reloadable(stack)) << "copyable even when not executed";
  BpfCode loop{insn(BPF_JMP | BPF_JA, 0, 0, -1, 0)};
  EXPECT_EQ(run_device_program(loop, gpu, kAccessRead), Verdict::kUnknown);
  BpfCode past_ctx{insn(BPF_LDX | BPF_MEM | BPF_W, 0, 1, 12, 0), insn(BPF_JMP | BPF_EXIT, 0, 0, 0, 0)};
  EXPECT_EQ(run_device_program(past_ctx, gpu, kAccessRead), Verdict::kUnknown);
  EXPECT_EQ(run_device_program({}, gpu, kAccessRead), Verdict::kUnknown);
  // A wrapper around code it cannot follow still answers for the wanted devices.
  auto wrapped = wrap_device_program({{gpu, kAccessReadWrite, "nvidia0", ""}}, call);
  EXPECT_EQ(program_allows(wrapped, gpu, kAccessReadWrite), Verdict::kAllow);
  EXPECT_EQ(run_device_program(wrapped, {DeviceType::kChar, 1, 3}, kAccessRead), Verdict::kUnknown);
}

}  // namespace
}  // namespace gdw
