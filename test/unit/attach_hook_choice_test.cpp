// Issue 39, 2: the attach hook's kind is the cheapest the kernel allows, tried in the order
// lsm/bpf, fexit on the cgroup attach path, tp_btf/kmalloc, then the capability trigger;
// the choice says why each cheaper one was refused. A table of kernels, as the loader
// (daemon/probe/attach_hooks.h) finds them.
#include "core/attach_hook_choice.h"

#include <gtest/gtest.h>

#include <optional>
#include <string>

#include "probe/attach_hooks.h"

namespace gdw {
namespace {

AttachHookRefusals refusals(std::string lsm, std::string fexit, std::string kmalloc, std::string capability = "") {
  return {std::move(lsm), std::move(fexit), std::move(kmalloc), std::move(capability)};
}

const std::string kNotInList = "bpf is not in the active LSM list (lockdown,capability,yama,apparmor; ...)";
const std::string kNoTrampolines = "the kernel refuses BPF trampoline programs here (EPERM at load)";
const std::string kOff = "turned off (probe.attach_hook: false)";

struct Kernel {
  const char* name;
  AttachHookRefusals refused;
  std::optional<AttachHookKind> chosen;
  std::size_t refusals_said;
};

TEST(AttachHookChoice, EachKernelGetsTheCheapestKindItAllows) {
  const Kernel kernels[] = {
      {"6.1/6.12 with bpf in lsm=", refusals("", "", ""), AttachHookKind::kLsm, 0},
      {"6.1/6.12 without bpf in lsm=", refusals(kNotInList, "", ""), AttachHookKind::kFexit, 1},
      {"6.18 here: no trampolines", refusals(kNoTrampolines, kNoTrampolines, ""), AttachHookKind::kKmalloc, 2},
      {"no trampolines, kernel symbols hidden", refusals(kNotInList, kNoTrampolines, "none of its call sites"),
       AttachHookKind::kCapability, 3},
      {"probe.attach_hook: false", refusals(kOff, kOff, kOff), AttachHookKind::kCapability, 3},
      {"before 6.14, no trampolines, before 5.16", refusals(kNotInList, kNoTrampolines, "invalid argument",
                                                            "no cap_capable tracepoint (before 6.14)"),
       std::nullopt, 4},
  };
  for (const auto& k : kernels) {
    const AttachHookChoice choice = choose_attach_hook(k.refused);
    EXPECT_EQ(choice.chosen, k.chosen) << k.name;
    EXPECT_EQ(choice.refused.size(), k.refusals_said) << k.name;
    for (std::size_t i = 0; i < choice.refused.size(); ++i) {
      EXPECT_EQ(choice.refused[i].first, kAttachHookKinds[i]) << k.name << ": in the order tried";
      EXPECT_FALSE(choice.refused[i].second.empty()) << k.name;
    }
  }
}

TEST(AttachHookChoice, TheLogSaysWhichKindIsInForceAndWhyTheCheaperOnesWereRefused) {
  const AttachHookChoice here = choose_attach_hook(refusals(kNotInList, kNoTrampolines, ""));
  EXPECT_EQ(here.describe(), "tp_btf/kmalloc (lsm/bpf refused: " + kNotInList +
                                 "; fexit/cgroup_bpf_prog_attach refused: " + kNoTrampolines + ")");
  EXPECT_EQ(choose_attach_hook(refusals("", "", "")).describe(), "lsm/bpf");
  EXPECT_EQ(to_string(AttachHookKind::kLsm), "lsm");
  EXPECT_EQ(to_string(AttachHookKind::kFexit), "fexit");
  EXPECT_EQ(to_string(AttachHookKind::kKmalloc), "kmalloc");
  EXPECT_EQ(to_string(AttachHookKind::kCapability), "capability");
}

// What securityfs says: bpf must be named in the active list for lsm/bpf to run at all (a
// BPF LSM program attaches on a kernel without it, and is never called).
TEST(AttachHookChoice, LsmBpfNeedsBpfInTheActiveList) {
  EXPECT_EQ(lsm_list_refusal("lockdown,capability,landlock,yama,apparmor,bpf\n"), "");
  EXPECT_EQ(lsm_list_refusal("bpf,capability"), "");
  const std::string without = lsm_list_refusal("lockdown,capability,landlock,yama,apparmor\n");
  EXPECT_NE(without.find("bpf is not in the active LSM list (lockdown,capability,landlock,yama,apparmor;"),
            std::string::npos)
      << without;
  EXPECT_NE(lsm_list_refusal("bpfx,xbpf"), "");
  EXPECT_NE(lsm_bpf_refusal("/nonexistent/lsm").find("cannot be read"), std::string::npos);
}

}  // namespace
}  // namespace gdw
