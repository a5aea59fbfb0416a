// cgroup v2 on the real kernel (the cgroup2 mount at /sys/fs/cgroup/unified): a container
// whose runtime program allows the GPU (as the NVIDIA hook leaves it), then systemd's
// program after a daemon-reload ANDed on top of it (seed 004: the GPU is denied). `check
// --repair` and the daemon wrap only the program that denies (systemd's) so that it allows
// the wanted devices; every other program and verdict stays. Access is proven with open()
// from inside the cgroup.
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <filesystem>
#include <thread>

#include "backend/device_programs_v2.h"
#include "support/daemon_harness.h"
#include "support/foreign_device_program.h"
#include "support/process_usage.h"

namespace gdw::test {
namespace {

class V2Repair : public ::testing::Test {
 protected:
  void SetUp() override {
    if (auto why = SandboxNode::v2_unavailable_reason(); !why.empty()) GTEST_SKIP() << why;
    node_ = std::make_unique<SandboxNode>(SandboxNode::Options{.v2 = true});
    c_ = &node_->add_container({.pod_namespace = "ml", .pod_name = "trainer-0", .container_name = "trainer",
                                .device_ids = {node_->gpu_uuid(0)}});
    node_->write_checkpoint();
    // /dev/mem's numbers: a device the spec denies, which must stay denied.
    ASSERT_EQ(::mknod(node_->node_path("mem").c_str(), S_IFCHR | 0600, makedev(1, 1)), 0);
  }
  std::unique_ptr<SandboxNode> node_;
  const SandboxContainer* c_ = nullptr;
};

TEST_F(V2Repair, CheckFindsTheAndedProgramAndRepairKeepsTheSpec) {
  EXPECT_EQ(node_->open_errno(*c_, "nvidia0"), ENXIO);
  node_->reapply_spec(*c_);  // systemd's program after a reload
  EXPECT_EQ(node_->open_errno(*c_, "nvidia0"), EPERM);
  EXPECT_EQ(node_->open_errno(*c_, "nvidia-uvm"), EPERM);
  const std::string config = node_->write_config();

  auto before = run_command({GDW_BINARY, "check", "--config", config});
  EXPECT_EQ(before.exit_code, 1) << before.out << before.err;
  EXPECT_NE(before.out.find("cgroup v2 device programs"), std::string::npos) << before.out;

  auto repair = run_command({GDW_BINARY, "check", "--repair", "--config", config});
  EXPECT_EQ(repair.exit_code, 0) << repair.out << repair.err;
  EXPECT_EQ(node_->open_errno(*c_, "nvidia0"), ENXIO);
  EXPECT_EQ(node_->open_errno(*c_, "nvidia-uvm"), ENXIO);
  EXPECT_EQ(node_->open_errno(*c_, "nvidiactl"), ENXIO);
  // What the spec denies stays denied; nothing beyond the allocation.
  EXPECT_EQ(node_->open_errno(*c_, "mem"), EPERM);
  EXPECT_EQ(node_->open_errno(*c_, "nvidia1"), EPERM);
  auto programs = query_device_programs(c_->cgroup_dir);
  ASSERT_TRUE(programs.ok()) << programs.error().message;
  ASSERT_EQ(programs->size(), 2u) << "the runtime's program (allows the GPU) stays; systemd's is wrapped";
  EXPECT_EQ((*programs)[0].owner, ProgramOwner::kRuntime);
  EXPECT_EQ((*programs)[1].owner, ProgramOwner::kOurs);

  auto after = run_command({GDW_BINARY, "check", "--config", config});
  EXPECT_EQ(after.exit_code, 0) << after.out << after.err;
}

// With or without the syscall hook, the probe sees the attach itself: its attach hook while
// the kernel installs the program (the default), and the hook at the syscall's exit. The
// repair comes at once, not at the next program_query_interval, and names who did it.
class V2RepairOnProbeEvents : public V2Repair, public ::testing::WithParamInterface<const char*> {};

TEST_P(V2RepairOnProbeEvents, TheDaemonRepairsAndNamesTheCaller) {
  const std::string hook = GetParam();
  DaemonHarness daemon(*node_);
  // A long query interval: the repair must come from the probe's event, not the timer.
  ASSERT_TRUE(daemon.start("daemon:\n  program_query_interval: 1h\n", /*probe=*/true, "",
                           "  syscall_hook: " + hook + "\n"))
      << daemon.output();
  if (daemon.metric("gpu_devwatch_probe_loaded") != 1) GTEST_SKIP() << "probe not loadable:\n" << daemon.output();
  // The runtime's program allows the GPU from the start: nothing to repair yet.
  ASSERT_TRUE(daemon.eventually_errno(*c_, "nvidia0", ENXIO)) << daemon.output();
  EXPECT_EQ(daemon.metric("gpu_devwatch_probe_syscall_hook_attached"), hook == "always" ? 1 : 0);
  EXPECT_EQ(daemon.metric("gpu_devwatch_probe_attach_hook_attached"), 1) << daemon.output();
  // A v2 node has no rule files: nothing of the probe runs on the node's capability checks.
  EXPECT_EQ(daemon.metric("gpu_devwatch_probe_capability_hook_attached"), 0) << daemon.output();
  // Which kind of attach hook is in force (the cheapest this kernel allows) is in the log
  // and in the metric's kind label.
  std::string kind;
  for (const char* k : {"lsm", "fexit", "kmalloc"})
    if (daemon.metric("gpu_devwatch_probe_attach_hook_attached", {{"kind", k}}) == 1) kind = k;
  ASSERT_FALSE(kind.empty()) << daemon.metrics();
  const std::string point = kind == "lsm" ? "lsm/bpf" : kind == "fexit" ? "fexit/cgroup_bpf_prog_attach" : "tp_btf/kmalloc";
  EXPECT_TRUE(daemon.process().wait_for_output("eBPF probe on a cgroup v2 node: attach hook " + point)) << daemon.output();
  EXPECT_NE(daemon.output().find("; capability hook off"), std::string::npos) << daemon.output();
  if (kind != "lsm") {
    EXPECT_NE(daemon.output().find("lsm/bpf refused: "), std::string::npos) << "why the cheaper kinds were refused";
  }

  // Whether swaps carry a revision (Linux 6.17+) is said at startup, as this kernel has it.
  auto revision = device_programs_revision(c_->cgroup_dir);
  ASSERT_TRUE(revision.ok()) << revision.error().message;
  EXPECT_EQ(daemon.metric("gpu_devwatch_device_program_swap_revisions"), *revision != 0 ? 1 : 0) << daemon.metrics();
  EXPECT_NE(daemon.output().find(*revision != 0 ? "device program swaps carry the revision"
                                                 : "the kernel keeps no revisions of a cgroup's device programs"),
            std::string::npos)
      << daemon.output();

  node_->reapply_spec(*c_);  // systemd's reload: a new ANDed program
  EXPECT_TRUE(daemon.eventually_errno(*c_, "nvidia0", ENXIO)) << daemon.output();
  EXPECT_EQ(node_->open_errno(*c_, "mem"), EPERM);
  EXPECT_EQ(node_->open_errno(*c_, "nvidia1"), EPERM);
  // The counts follow the grant the tenant sees (on one slow CPU, as in the kernel
  // matrix's guests, a scrape can come between the two).
  EXPECT_TRUE(eventually([&] {
    return daemon.metric("gpu_devwatch_regrants_total", {{"method", "bpf"}, {"result", "success"}}) >= 1 &&
           daemon.metric("gpu_devwatch_probe_record_delay_seconds_count") >= 1;
  })) << daemon.metrics();
  EXPECT_GE(daemon.metric("gpu_devwatch_drift_total", {{"device", "nvidia0"}}), 1);
  // The attach's record was read, and how long after the kernel took it is counted.
  EXPECT_GT(daemon.metric("gpu_devwatch_probe_record_delay_seconds_sum"), 0);
  EXPECT_LT(daemon.metric("gpu_devwatch_probe_record_delay_seconds_sum"),
            daemon.metric("gpu_devwatch_probe_record_delay_seconds_count") * 5.0)
      << "a delay is the time the record waited, not a timestamp";
  EXPECT_TRUE(daemon.process().wait_for_output(") attaching device program")) << daemon.output();
  // The attacher's executable (this test's) is read after the grant, while it still runs.
  EXPECT_NE(daemon.output().find(", " + std::filesystem::read_symlink("/proc/self/exe").string() + ", parent "),
            std::string::npos)
      << daemon.output();
  // The startup repair had no cause to name: its line does not borrow the later one's.
  EXPECT_EQ(daemon.output().find("tools,nvidia0"), std::string::npos) << daemon.output();
  // systemd's program was wrapped by ours; the runtime's, which allows the GPU, stays. The
  // gauges come from the repaired container's share, read again alone after the probe's
  // repair (GaugeTally), not from a count of the whole table.
  EXPECT_TRUE(daemon.eventually_metric_at_least("gpu_devwatch_device_programs_replaced_total", 1)) << daemon.metrics();
  EXPECT_TRUE(eventually([&] {
    return daemon.metric("gpu_devwatch_device_programs", {{"owner", "ours"}}) == 1 &&
           daemon.metric("gpu_devwatch_device_programs", {{"owner", "runtime"}}) == 1 &&
           daemon.metric("gpu_devwatch_device_programs", {{"owner", "systemd"}}) == 0;
  })) << daemon.metrics();
}

// After a repair the daemon loads a spare copy of the wrapper it used (on a timer, once
// the tenant has its devices back), so that the next re-apply of the same cgroup is
// answered without a verifier run: the next repair attaches the spare.
TEST_F(V2Repair, AfterARepairASpareWrapperWaitsForTheNextReapply) {
  DaemonHarness daemon(*node_);
  ASSERT_TRUE(daemon.start("daemon:\n  program_query_interval: 1h\n", /*probe=*/true)) << daemon.output();
  if (daemon.metric("gpu_devwatch_probe_loaded") != 1) GTEST_SKIP() << "probe not loadable:\n" << daemon.output();
  ASSERT_TRUE(daemon.eventually_errno(*c_, "nvidia0", ENXIO)) << daemon.output();
  const pid_t pid = daemon.process().pid();
  const std::size_t held_before = program_ids_held(pid, BPF_PROG_TYPE_CGROUP_DEVICE).size();

  node_->reapply_spec(*c_);  // systemd's program, ANDed on: wrapped
  ASSERT_TRUE(daemon.eventually_errno(*c_, "nvidia0", ENXIO)) << daemon.output();
  std::set<std::uint32_t> held;
  EXPECT_TRUE(eventually([&] {
    held = program_ids_held(pid, BPF_PROG_TYPE_CGROUP_DEVICE);
    return held.size() == held_before + 2;
  })) << held.size() << " held, " << held_before << " before: the wrapper attached and a spare";
  auto programs = query_device_programs(c_->cgroup_dir);
  ASSERT_TRUE(programs.ok()) << programs.error().message;
  std::set<std::uint32_t> spare = held;
  for (const auto& p : *programs) spare.erase(p.id);
  ASSERT_FALSE(spare.empty());

  node_->reapply_spec(*c_);  // the same spec again: the same wrapper, attached here already
  ASSERT_TRUE(daemon.eventually_errno(*c_, "nvidia0", ENXIO)) << daemon.output();
  programs = query_device_programs(c_->cgroup_dir);
  ASSERT_TRUE(programs.ok()) << programs.error().message;
  EXPECT_TRUE(std::any_of(programs->begin(), programs->end(), [&](const auto& p) { return spare.count(p.id); }))
      << "the second repair attached the spare loaded after the first";
  EXPECT_EQ(node_->open_errno(*c_, "mem"), EPERM);
}

INSTANTIATE_TEST_SUITE_P(SyscallHook, V2RepairOnProbeEvents, ::testing::Values("on-drift", "always"),
                         [](const auto& info) { return std::string(info.param) == "always" ? "Attached" : "Detached"; });

// probe.attach_hook: false (nothing runs on the node's kmallocs): the re-applier's program
// load is what the probe reports, and the GPU containers' programs are read again 1 ms to
// 1 s after it. The repair still comes from the probe, not the hour-long query timer.
TEST_F(V2Repair, WithTheAttachHookOffAProgramLoadLeadsToTheRepair) {
  DaemonHarness daemon(*node_);
  ASSERT_TRUE(daemon.start("daemon:\n  program_query_interval: 1h\n", /*probe=*/true, "", "  attach_hook: false\n"))
      << daemon.output();
  if (daemon.metric("gpu_devwatch_probe_loaded") != 1) GTEST_SKIP() << "probe not loadable:\n" << daemon.output();
  EXPECT_EQ(daemon.metric("gpu_devwatch_probe_attach_hook_attached"), 0);
  if (daemon.metric("gpu_devwatch_probe_capability_hook_attached") == 0 &&
      daemon.output().find("no cap_capable tracepoint (before 6.14)") != std::string::npos)
    GTEST_SKIP() << "no cap_capable tracepoint on this kernel: program loads are not seen either";
  // Program loads are seen at their CAP_BPF check: the capability hook stays.
  EXPECT_EQ(daemon.metric("gpu_devwatch_probe_capability_hook_attached"), 1);
  EXPECT_NE(daemon.output().find("attach hook off (probe.attach_hook: false)"), std::string::npos) << daemon.output();
  ASSERT_TRUE(daemon.eventually_errno(*c_, "nvidia0", ENXIO)) << daemon.output();

  node_->reapply_spec(*c_);  // systemd's reload: a program loaded, then ANDed on
  EXPECT_TRUE(daemon.eventually_errno(*c_, "nvidia0", ENXIO)) << daemon.output();
  EXPECT_EQ(node_->open_errno(*c_, "mem"), EPERM);
  EXPECT_EQ(node_->open_errno(*c_, "nvidia1"), EPERM);
  EXPECT_TRUE(daemon.eventually_metric_at_least("gpu_devwatch_device_programs_replaced_total", 1)) << daemon.metrics();
}

TEST_F(V2Repair, WithoutTheProbeThePeriodicQueryRepairs) {
  DaemonHarness daemon(*node_);
  ASSERT_TRUE(daemon.start("daemon:\n  program_query_interval: 200ms\n", /*probe=*/false)) << daemon.output();
  EXPECT_EQ(daemon.metric("gpu_devwatch_containers_watched"), 1);
  node_->reapply_spec(*c_);
  EXPECT_TRUE(daemon.eventually_errno(*c_, "nvidia0", ENXIO)) << daemon.output();
  EXPECT_EQ(node_->open_errno(*c_, "mem"), EPERM);
}

std::vector<std::uint32_t> program_ids(const std::string& cgroup_dir) {
  std::vector<std::uint32_t> ids;
  auto programs = query_device_programs(cgroup_dir);
  EXPECT_TRUE(programs.ok()) << programs.error().message;
  if (programs.ok())
    for (const auto& p : *programs) ids.push_back(p.id);
  return ids;
}

// Issue 10, item 5: a healthy GPU container (missing nothing) keeps its programs: the same
// ids after `check --repair` and after the daemon's startup pass and query timer.
TEST_F(V2Repair, AHealthyContainersProgramsStayUntouched) {
  const auto ids = program_ids(c_->cgroup_dir);
  ASSERT_EQ(ids.size(), 1u);
  const std::string config = node_->write_config();
  auto repair = run_command({GDW_BINARY, "check", "--repair", "--config", config});
  EXPECT_EQ(repair.exit_code, 0) << repair.out << repair.err;
  EXPECT_EQ(program_ids(c_->cgroup_dir), ids) << repair.out;
  {
    DaemonHarness daemon(*node_);
    ASSERT_TRUE(daemon.start("daemon:\n  program_query_interval: 100ms\n", /*probe=*/false)) << daemon.output();
    EXPECT_EQ(daemon.metric("gpu_devwatch_containers_watched"), 1);
    std::this_thread::sleep_for(std::chrono::milliseconds(500));  // a few query passes
    EXPECT_EQ(daemon.metric("gpu_devwatch_device_programs_replaced_total"), 0) << daemon.output();
  }
  EXPECT_EQ(program_ids(c_->cgroup_dir), ids);
  EXPECT_EQ(node_->open_errno(*c_, "nvidia0"), ENXIO);
}

// Issue 10, item 5, end to end through `check --repair`: a security agent's program
// denying /dev/null stays in force after a reload and the repair; the GPU comes back.
TEST_F(V2Repair, CheckRepairKeepsAThirdProgramsRestriction) {
  ASSERT_EQ(::mknod(node_->node_path("null").c_str(), S_IFCHR | 0600, makedev(1, 3)), 0);
  ASSERT_EQ(node_->open_errno(*c_, "null"), 0);
  ForeignProgram agent("agent", {{true, DeviceRule{}}, {false, DeviceRule{DeviceType::kChar, 1, 3, kAccessAll}}});
  ASSERT_EQ(agent.attach(c_->cgroup_dir), 0);
  ASSERT_EQ(node_->open_errno(*c_, "null"), EPERM);
  node_->reapply_spec(*c_);  // systemd's reload: the GPU is denied
  ASSERT_EQ(node_->open_errno(*c_, "nvidia0"), EPERM);
  const std::string config = node_->write_config();
  auto repair = run_command({GDW_BINARY, "check", "--repair", "--config", config});
  EXPECT_EQ(repair.exit_code, 0) << repair.out << repair.err;
  EXPECT_EQ(node_->open_errno(*c_, "nvidia0"), ENXIO);
  EXPECT_EQ(node_->open_errno(*c_, "null"), EPERM) << "the agent's restriction is kept\n" << repair.out;
  EXPECT_EQ(node_->open_errno(*c_, "mem"), EPERM);
  auto ids = program_ids(c_->cgroup_dir);
  EXPECT_EQ(ids.size(), 3u);
  EXPECT_NE(std::find(ids.begin(), ids.end(), agent.id), ids.end()) << "the agent's program is untouched";
}

}  // namespace
}  // namespace gdw::test
