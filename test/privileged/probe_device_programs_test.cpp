// The eBPF probe on the real kernel, cgroup v2: device program loads, attaches, replaces,
// links and detaches, as the syscall hook sees them and as the attach hook sees an attach to
// a watched cgroup while the kernel installs it. Other test runs may share the kernel, so
// every assertion only looks at events from this test's own processes and cgroups.
#include <bpf/bpf.h>
#include <fcntl.h>
#include <linux/bpf.h>
#include <poll.h>
#include <grp.h>
#include <linux/capability.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <sys/uio.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <chrono>
#include <cstring>
#include <functional>
#include <optional>
#include <string>
#include <thread>
#include <tuple>
#include <vector>

#include <gtest/gtest.h>

#include "probe/probe.h"
#include "support/cgroup_sandbox.h"
#include "support/device_program_tools.h"
#include "support/probe_event_log.h"
#include "probe/attach_hooks.h"
#include "support/probe_fixture.h"
#include "support/process.h"
#include "support/temp_dir.h"

namespace gdw {
namespace {

using test::CgroupSandbox;
using test::EventLog;
using test::inode_of;
using test::own_comm;
using test::ProbeTest;

// ---- v2 device programs ---------------------------------------------------------------------

// A BPF_PROG_TYPE_CGROUP_DEVICE program that allows everything ("r0 = 1; exit").
int load_allow_all_device_program() {
  const bpf_insn insns[] = {
      {BPF_ALU64 | BPF_MOV | BPF_K, BPF_REG_0, 0, 0, 1},
      {BPF_JMP | BPF_EXIT, 0, 0, 0, 0},
  };
  return bpf_prog_load(BPF_PROG_TYPE_CGROUP_DEVICE, "gdw_test_allow", "GPL", insns, 2, nullptr);
}

std::uint32_t prog_id(int prog_fd) {
  bpf_prog_info info{};
  std::uint32_t len = sizeof(info);
  if (bpf_obj_get_info_by_fd(prog_fd, &info, &len) != 0) ADD_FAILURE() << "bpf_obj_get_info_by_fd failed";
  return info.id;
}

// Attach/detach events are the syscall hook's.
class ProbeDeviceProgramTest : public ProbeTest {
 protected:
  ProbeOptions options() const override { return {.use_capability_tracepoint = true, .syscall_hook = true}; }

  void SetUp() override {
    ProbeTest::SetUp();
    if (IsSkipped() || HasFatalFailure()) return;
    if (!CgroupSandbox::available("unified")) GTEST_SKIP() << "no writable cgroup2 at /sys/fs/cgroup/unified";
    sandbox_.emplace("unified", "probe-v2");
    cgroup_dir_ = sandbox_->make("container");
    cgroup_id_ = inode_of(cgroup_dir_);
    cgroup_fd_ = ::open(cgroup_dir_.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    ASSERT_GE(cgroup_fd_, 0);
    first_prog_ = load_allow_all_device_program();
    second_prog_ = load_allow_all_device_program();
    ASSERT_GE(first_prog_, 0) << "loading a cgroup device program: " << std::strerror(errno);
    ASSERT_GE(second_prog_, 0);
  }
  void TearDown() override {
    for (int fd : {first_prog_, second_prog_, cgroup_fd_}) {
      if (fd >= 0) ::close(fd);
    }
  }

  std::optional<DeviceProgramEvent> wait_for_command(DeviceProgramEvent::Command command) {
    return log_->wait_for<DeviceProgramEvent>([&](const DeviceProgramEvent& e) {
      return e.caller.pid == ::getpid() && e.command == command && e.target_cgroup_id == cgroup_id_;
    });
  }

  std::optional<CgroupSandbox> sandbox_;
  std::string cgroup_dir_;
  std::uint64_t cgroup_id_ = 0;
  int cgroup_fd_ = -1, first_prog_ = -1, second_prog_ = -1;
};

TEST_F(ProbeDeviceProgramTest, ProgAttachAndDetach) {
  ASSERT_EQ(bpf_prog_attach(first_prog_, cgroup_fd_, BPF_CGROUP_DEVICE, BPF_F_ALLOW_MULTI), 0);
  ASSERT_EQ(bpf_prog_detach2(first_prog_, cgroup_fd_, BPF_CGROUP_DEVICE), 0);

  auto attach = wait_for_command(DeviceProgramEvent::Command::kProgAttach);
  ASSERT_TRUE(attach);
  EXPECT_EQ(attach->prog_id, prog_id(first_prog_));
  EXPECT_EQ(attach->flags, static_cast<std::uint32_t>(BPF_F_ALLOW_MULTI));
  EXPECT_EQ(attach->replaced_prog_id, 0u);
  EXPECT_EQ(attach->result, 0);
  EXPECT_EQ(attach->caller.comm, own_comm());

  auto detach = wait_for_command(DeviceProgramEvent::Command::kProgDetach);
  ASSERT_TRUE(detach);
  EXPECT_EQ(detach->prog_id, prog_id(first_prog_));
  EXPECT_EQ(detach->result, 0);
}

TEST_F(ProbeDeviceProgramTest, ReplacingAttachNamesTheReplacedProgram) {
  ASSERT_EQ(bpf_prog_attach(first_prog_, cgroup_fd_, BPF_CGROUP_DEVICE, BPF_F_ALLOW_MULTI), 0);
  struct bpf_prog_attach_opts opts {};
  opts.sz = sizeof(opts);
  opts.flags = BPF_F_ALLOW_MULTI | BPF_F_REPLACE;
  opts.replace_prog_fd = first_prog_;
  ASSERT_EQ(bpf_prog_attach_opts(second_prog_, cgroup_fd_, BPF_CGROUP_DEVICE, &opts), 0);
  ASSERT_EQ(bpf_prog_detach2(second_prog_, cgroup_fd_, BPF_CGROUP_DEVICE), 0);

  auto replace = log_->wait_for<DeviceProgramEvent>([&](const DeviceProgramEvent& e) {
    return e.caller.pid == ::getpid() && e.target_cgroup_id == cgroup_id_ && e.prog_id == prog_id(second_prog_) &&
           e.command == DeviceProgramEvent::Command::kProgAttach;
  });
  ASSERT_TRUE(replace);
  EXPECT_EQ(replace->replaced_prog_id, prog_id(first_prog_));
  EXPECT_EQ(replace->result, 0);
}

TEST_F(ProbeDeviceProgramTest, FailedDetachCarriesTheError) {
  // Nothing is attached: the kernel answers ENOENT.
  EXPECT_NE(bpf_prog_detach2(first_prog_, cgroup_fd_, BPF_CGROUP_DEVICE), 0);
  auto detach = wait_for_command(DeviceProgramEvent::Command::kProgDetach);
  ASSERT_TRUE(detach);
  EXPECT_EQ(detach->result, -ENOENT);
}

TEST_F(ProbeDeviceProgramTest, LinkCreateUpdateDetach) {
  int link = bpf_link_create(first_prog_, cgroup_fd_, BPF_CGROUP_DEVICE, nullptr);
  ASSERT_GE(link, 0) << std::strerror(errno);
  ASSERT_EQ(bpf_link_update(link, second_prog_, nullptr), 0);
  ASSERT_EQ(bpf_link_detach(link), 0);
  ::close(link);

  auto create = wait_for_command(DeviceProgramEvent::Command::kLinkCreate);
  ASSERT_TRUE(create);
  EXPECT_EQ(create->prog_id, prog_id(first_prog_));
  EXPECT_EQ(create->result, link);  // LINK_CREATE returns the new link's fd

  auto update = wait_for_command(DeviceProgramEvent::Command::kLinkUpdate);
  ASSERT_TRUE(update);
  EXPECT_EQ(update->prog_id, prog_id(second_prog_));
  EXPECT_EQ(update->replaced_prog_id, prog_id(first_prog_));
  EXPECT_EQ(update->result, 0);

  auto detach = wait_for_command(DeviceProgramEvent::Command::kLinkDetach);
  ASSERT_TRUE(detach);
  EXPECT_EQ(detach->prog_id, prog_id(second_prog_));
  EXPECT_EQ(detach->result, 0);
}

TEST_F(ProbeDeviceProgramTest, LinkMadeBeforeTheProbeStillNamesItsCgroupWhenUpdatedAndDetached) {
  int link = bpf_link_create(first_prog_, cgroup_fd_, BPF_CGROUP_DEVICE, nullptr);
  ASSERT_GE(link, 0) << std::strerror(errno);
  auto late = Probe::load(options());  // sees the link only through its listing at load
  ASSERT_TRUE(late) << late.error().message;
  ASSERT_EQ(bpf_link_update(link, second_prog_, nullptr), 0);
  ASSERT_EQ(bpf_link_detach(link), 0);
  ::close(link);

  EventLog late_log(**late);
  auto mine = [&](DeviceProgramEvent::Command command) {
    return [this, command](const DeviceProgramEvent& e) {
      return e.caller.pid == ::getpid() && e.command == command && e.target_cgroup_id == cgroup_id_;
    };
  };
  auto update = late_log.wait_for<DeviceProgramEvent>(mine(DeviceProgramEvent::Command::kLinkUpdate));
  ASSERT_TRUE(update);
  EXPECT_EQ(update->replaced_prog_id, prog_id(first_prog_));
  auto detach = late_log.wait_for<DeviceProgramEvent>(mine(DeviceProgramEvent::Command::kLinkDetach));
  ASSERT_TRUE(detach) << "the detached link's cgroup was not remembered";
  EXPECT_EQ(detach->prog_id, prog_id(second_prog_));
}

// Without the attach hook (a kernel that refuses it), device program loads are what the
// probe reports.
class ProbeWithoutAttachHookTest : public ProbeTest {
 protected:
  ProbeOptions options() const override { return {.attach_hook = false}; }
};

TEST_F(ProbeWithoutAttachHookTest, DeviceProgramLoadIsReportedWithoutTheHook) {
  EXPECT_FALSE(probe_->attach_hook());
  if (!probe_->capability_hook())
    GTEST_SKIP() << "no cap_capable tracepoint (before 6.14): a load is seen only by the syscall hook";
  const AttachHookChoice choice = probe_->attach_hook_choice();
  EXPECT_EQ(choice.chosen, std::optional(AttachHookKind::kCapability)) << choice.describe();
  ASSERT_EQ(choice.refused.size(), 3u);
  for (const auto& [kind, why] : choice.refused) EXPECT_EQ(why, "turned off (probe.attach_hook: false)") << to_string(kind);
  const bpf_insn accept[] = {
      {BPF_ALU64 | BPF_MOV | BPF_K, BPF_REG_0, 0, 0, 0},
      {BPF_JMP | BPF_EXIT, 0, 0, 0, 0},
  };
  // A socket filter first: not a device program, not reported.
  int filter = bpf_prog_load(BPF_PROG_TYPE_SOCKET_FILTER, "gdw_test_sock", "GPL", accept, 2, nullptr);
  ASSERT_GE(filter, 0) << std::strerror(errno);
  ::close(filter);
  int device = load_allow_all_device_program();
  ASSERT_GE(device, 0) << std::strerror(errno);

  auto load = log_->wait_for<DeviceProgramLoadEvent>(
      [&](const DeviceProgramLoadEvent& e) { return e.caller.pid == ::getpid(); });
  ASSERT_TRUE(load);
  EXPECT_EQ(load->caller.comm, own_comm());
  EXPECT_GT(load->ktime_ns, 0u);
  EXPECT_EQ(log_->all<DeviceProgramLoadEvent>([&](const DeviceProgramLoadEvent& e) {
              return e.caller.pid == ::getpid();
            }).size(),
            1u)
      << "the socket filter was reported too";
  ::close(device);
}

// ---- the attach hook (cgroup v2) -------------------------------------------------------------

// Each kind of the attach hook (issue 39, 2), alone, where this kernel takes it (a kind it
// refuses is skipped, saying why; the QEMU matrix runs the ones this host refuses):
// attaches of device programs to watched program cgroups are reported without the syscall
// hook, while the kernel installs them (kmalloc, fexit) or at the bpf() call's start
// (lsm/bpf, flagged ahead of the install); loads are not reported then.
}  // namespace

// Test names and messages say the kind.
void PrintTo(AttachHookKind kind, std::ostream* os) { *os << to_string(kind); }

namespace {

class ProbeAttachHookTest : public ProbeDeviceProgramTest, public ::testing::WithParamInterface<AttachHookKind> {
 protected:
  ProbeOptions options() const override { return {.attach_hook_kinds = {GetParam()}}; }

  void SetUp() override {
    ProbeDeviceProgramTest::SetUp();
    if (IsSkipped() || HasFatalFailure()) return;
    if (!probe_->attach_hook()) {
      // Refused here (this CI host refuses trampolines; the kernel matrix's guests load
      // every kind): what the daemon then relies on is that the probe says so, and why.
      refused_here_ = true;
      const AttachHookChoice choice = probe_->attach_hook_choice();
      EXPECT_NE(choice.chosen, std::optional(GetParam())) << "a cheaper kind or the capability trigger instead";
      const auto named = std::find_if(choice.refused.begin(), choice.refused.end(),
                                      [&](const auto& r) { return r.first == GetParam(); });
      ASSERT_NE(named, choice.refused.end()) << choice.describe();
      EXPECT_FALSE(named->second.empty()) << "the refusal says why";
      std::printf("[ refused  ] %s on this kernel: %s\n", std::string(hook_point(GetParam())).c_str(), choice.describe().c_str());
      return;
    }
    ASSERT_EQ(probe_->attach_hook_kind(), std::optional(GetParam()));
    ASSERT_FALSE(probe_->syscall_hook_attached());
    ASSERT_TRUE(probe_->watch_program_cgroup(cgroup_id_));
  }

  bool refused_here_ = false;  // this kernel refuses the kind: SetUp checked it says why

  // Focused on programs (the attach hook stays the kind under test); false, said, where
  // this kernel's symbols lack the kmalloc kind's load site. The other kinds' load
  // points cannot be missing where the kind attached.
  bool focused_with_loads_ahead() {
    EXPECT_TRUE(probe_->focus(DevicePolicyForm::kPrograms));
    EXPECT_EQ(probe_->attach_hook_kind(), std::optional(GetParam()));
    if (probe_->program_loads_ahead()) return true;
    EXPECT_EQ(GetParam(), AttachHookKind::kKmalloc) << "lsm and fexit need no symbol for their load point";
    std::printf("[ refused  ] no load site (bpf_prog_alloc_no_stats) in this kernel's symbols\n");
    return false;
  }

  std::vector<DeviceProgramEvent> attaching(std::uint64_t cgroup) {
    return log_->all<DeviceProgramEvent>([&](const DeviceProgramEvent& e) {
      return e.caller.pid == ::getpid() && e.attaching && e.target_cgroup_id == cgroup;
    });
  }
};

TEST_P(ProbeAttachHookTest, AnAttachToAWatchedCgroupIsReportedAsTheKernelInstallsIt) {
  if (refused_here_) return;
  ASSERT_EQ(bpf_prog_attach(first_prog_, cgroup_fd_, BPF_CGROUP_DEVICE, BPF_F_ALLOW_MULTI), 0);
  auto attach = log_->wait_for<DeviceProgramEvent>([&](const DeviceProgramEvent& e) {
    return e.caller.pid == ::getpid() && e.attaching && e.target_cgroup_id == cgroup_id_;
  });
  ASSERT_TRUE(attach) << "no attach record without the syscall hook";
  EXPECT_EQ(attach->command, DeviceProgramEvent::Command::kProgAttach);
  EXPECT_EQ(attach->prog_id, prog_id(first_prog_));
  EXPECT_EQ(attach->flags, static_cast<std::uint32_t>(BPF_F_ALLOW_MULTI));
  EXPECT_EQ(attach->caller.comm, own_comm());
  EXPECT_EQ(attach->ahead_of_install, GetParam() == AttachHookKind::kLsm);

  // A replacing attach names the program it replaces.
  struct bpf_prog_attach_opts opts {};
  opts.sz = sizeof(opts);
  opts.flags = BPF_F_ALLOW_MULTI | BPF_F_REPLACE;
  opts.replace_prog_fd = first_prog_;
  ASSERT_EQ(bpf_prog_attach_opts(second_prog_, cgroup_fd_, BPF_CGROUP_DEVICE, &opts), 0);
  auto replace = log_->wait_for<DeviceProgramEvent>([&](const DeviceProgramEvent& e) {
    return e.attaching && e.target_cgroup_id == cgroup_id_ && e.prog_id == prog_id(second_prog_);
  });
  ASSERT_TRUE(replace);
  EXPECT_EQ(replace->replaced_prog_id, prog_id(first_prog_));

  // A detach cannot revoke: not reported (the cgroup keeps one program, so the kernel
  // computes a new effective array for it all the same).
  ASSERT_EQ(bpf_prog_attach(first_prog_, cgroup_fd_, BPF_CGROUP_DEVICE, BPF_F_ALLOW_MULTI), 0);
  ASSERT_TRUE(log_->wait_for<DeviceProgramEvent>([&](const DeviceProgramEvent& e) {
    return e.attaching && e.target_cgroup_id == cgroup_id_ && e.prog_id == prog_id(first_prog_) &&
           e.replaced_prog_id == 0 && e.ktime_ns > replace->ktime_ns;
  }));
  const auto before = attaching(cgroup_id_).size();
  ASSERT_EQ(bpf_prog_detach2(first_prog_, cgroup_fd_, BPF_CGROUP_DEVICE), 0);
  ASSERT_EQ(bpf_prog_detach2(second_prog_, cgroup_fd_, BPF_CGROUP_DEVICE), 0);
  (void)log_->wait_for<DeviceProgramEvent>([](const DeviceProgramEvent&) { return false; },
                                          std::chrono::milliseconds(200));  // whatever came
  EXPECT_EQ(attaching(cgroup_id_).size(), before);
}

TEST_P(ProbeAttachHookTest, AnAttachElsewhereAndALoadAreNotReported) {
  if (refused_here_) return;
  const std::string other = sandbox_->make("other");
  const std::uint64_t other_id = inode_of(other);
  int other_fd = ::open(other.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  ASSERT_GE(other_fd, 0);
  ASSERT_EQ(bpf_prog_attach(first_prog_, other_fd, BPF_CGROUP_DEVICE, BPF_F_ALLOW_MULTI), 0);
  int loaded = load_allow_all_device_program();
  ASSERT_GE(loaded, 0);
  // A fence: an attach to the watched cgroup after both.
  ASSERT_EQ(bpf_prog_attach(second_prog_, cgroup_fd_, BPF_CGROUP_DEVICE, BPF_F_ALLOW_MULTI), 0);
  ASSERT_TRUE(log_->wait_for<DeviceProgramEvent>([&](const DeviceProgramEvent& e) {
    return e.attaching && e.target_cgroup_id == cgroup_id_ && e.prog_id == prog_id(second_prog_);
  }));
  EXPECT_TRUE(attaching(other_id).empty()) << "an unwatched cgroup's attach woke the daemon";
  EXPECT_TRUE(log_->all<DeviceProgramLoadEvent>([&](const DeviceProgramLoadEvent& e) {
                return e.caller.pid == ::getpid();
              }).empty())
      << "loads are not reported while the attaches are";
  ASSERT_EQ(bpf_prog_detach2(first_prog_, other_fd, BPF_CGROUP_DEVICE), 0);
  ASSERT_EQ(bpf_prog_detach2(second_prog_, cgroup_fd_, BPF_CGROUP_DEVICE), 0);
  ::close(loaded);
  ::close(other_fd);
}

TEST_P(ProbeAttachHookTest, ALinkToAWatchedCgroupIsReportedToo) {
  if (refused_here_) return;
  int link = bpf_link_create(first_prog_, cgroup_fd_, BPF_CGROUP_DEVICE, nullptr);
  ASSERT_GE(link, 0) << std::strerror(errno);
  auto created = log_->wait_for<DeviceProgramEvent>([&](const DeviceProgramEvent& e) {
    return e.attaching && e.target_cgroup_id == cgroup_id_ && e.command == DeviceProgramEvent::Command::kLinkCreate;
  });
  ASSERT_TRUE(created);
  EXPECT_EQ(created->prog_id, prog_id(first_prog_));
  ::close(link);
}

// Focused on programs, each kind also reports a device program load ahead of its attach
// (lsm/bpf at the load's start, fexit with an fentry on the program's allocation, kmalloc
// at that allocation), from inside a watched cgroup only (a tenant's own re-apply; systemd
// is the init process, also reported). The daemon wakes at the load, and the attach that
// follows finds it awake or just asleep.
TEST_P(ProbeAttachHookTest, FocusedOnProgramsATenantsLoadIsReportedAheadOfItsAttach) {
  if (refused_here_) return;
  if (!focused_with_loads_ahead()) return;
  EXPECT_FALSE(probe_->capability_hook()) << "loads seen without the capability hook's cost";
  // A tenant re-applying its own cgroup: loads, 20 ms later attaches.
  ASSERT_EQ(test::attach_as("gdw-tenant", cgroup_dir_, test::kAllowAllRules,
                            {.from_inside = true, .after_load = std::chrono::milliseconds(20)}),
            0)
      << "the child could not join, load or attach";
  auto load = log_->wait_for<DeviceProgramLoadEvent>(
      [&](const DeviceProgramLoadEvent& e) { return e.caller.comm == "gdw-tenant"; });
  auto attach = log_->wait_for<DeviceProgramEvent>(
      [&](const DeviceProgramEvent& e) { return e.caller.comm == "gdw-tenant" && e.target_cgroup_id == cgroup_id_; });
  ASSERT_TRUE(load) << "the tenant's load was not reported";
  ASSERT_TRUE(attach) << "the tenant's attach was not reported";
  EXPECT_EQ(load->caller.cgroup_id, cgroup_id_);
  EXPECT_LT(load->ktime_ns + 10'000'000, attach->ktime_ns) << "the load comes first, by the child's 20 ms";
  EXPECT_EQ(log_->all<DeviceProgramLoadEvent>([](const DeviceProgramLoadEvent& e) {
              return e.caller.comm == "gdw-tenant";
            }).size(),
            1u)
      << "one load, one record";
  // A load from anywhere else (this process: no watched cgroup) would wake the daemon for
  // nothing: not reported.
  int loaded = load_allow_all_device_program();
  ASSERT_GE(loaded, 0);
  EXPECT_FALSE(log_->wait_for<DeviceProgramLoadEvent>(
      [](const DeviceProgramLoadEvent& e) { return e.caller.pid == ::getpid(); }, std::chrono::milliseconds(300)));
  ::close(loaded);
}

// A tenant with CAP_BPF loading in a loop would wake the daemon at every load: the loads
// reported ahead are 1 ms apart at least, whoever makes them, and the attach is reported.
TEST_P(ProbeAttachHookTest, ATenantsLoadsInALoopWakeTheDaemonOnceAMillisecondAtMost) {
  if (refused_here_) return;
  if (!focused_with_loads_ahead()) return;
  constexpr int kLoads = 300;
  ASSERT_EQ(test::attach_as("gdw-tenant", cgroup_dir_, test::kAllowAllRules,
                            {.from_inside = true, .extra_loads = kLoads}),
            0)
      << "the child could not join, load or attach";
  ASSERT_TRUE(log_->wait_for<DeviceProgramEvent>(
      [&](const DeviceProgramEvent& e) { return e.caller.comm == "gdw-tenant" && e.target_cgroup_id == cgroup_id_; }))
      << "the tenant's attach was not reported";
  const auto loads = log_->all<DeviceProgramLoadEvent>(
      [](const DeviceProgramLoadEvent& e) { return e.caller.comm == "gdw-tenant"; });
  ASSERT_GE(loads.size(), 1u) << "the first load wakes the daemon";
  EXPECT_LT(loads.size(), static_cast<std::size_t>(kLoads)) << "every load woke it";
  for (std::size_t i = 1; i < loads.size(); ++i)
    EXPECT_GE(loads[i].ktime_ns - loads[i - 1].ktime_ns, 1'000'000u) << "reports " << i - 1 << " and " << i;
  std::printf("%d loads, %zu reported\n", kLoads + 1, loads.size());
}

INSTANTIATE_TEST_SUITE_P(Kinds, ProbeAttachHookTest,
                         ::testing::Values(AttachHookKind::kLsm, AttachHookKind::kFexit, AttachHookKind::kKmalloc),
                         [](const auto& info) { return std::string(to_string(info.param)); });

// The default probe takes the cheapest kind the kernel allows, and says why each cheaper
// one was refused: what the kernel says to each kind's own trial load.
TEST_F(ProbeTest, TheDefaultAttachHookIsTheCheapestKindThisKernelTakes) {
  const AttachHookChoice choice = probe_->attach_hook_choice();
  ASSERT_TRUE(probe_->attach_hook()) << choice.describe();
  const std::string lsm = lsm_bpf_refusal().empty() ? trampoline_refusal(AttachHookKind::kLsm) : lsm_bpf_refusal();
  const std::string fexit = trampoline_refusal(AttachHookKind::kFexit);
  const AttachHookKind expected = lsm.empty()     ? AttachHookKind::kLsm
                                  : fexit.empty() ? AttachHookKind::kFexit
                                                  : AttachHookKind::kKmalloc;
  EXPECT_EQ(choice.chosen, std::optional(expected)) << choice.describe();
  EXPECT_EQ(probe_->attach_hook_kind(), std::optional(expected));
  if (expected != AttachHookKind::kLsm) {
    ASSERT_GE(choice.refused.size(), 1u);
    EXPECT_EQ(choice.refused[0].second, lsm);
  }
  if (expected == AttachHookKind::kKmalloc) {
    ASSERT_EQ(choice.refused.size(), 2u);
    EXPECT_EQ(choice.refused[1].second, fexit);
  }
  std::printf("attach hook here: %s\n", choice.describe().c_str());
}

}  // namespace
}  // namespace gdw
