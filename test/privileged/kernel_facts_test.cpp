// What this kernel offers the daemon, said in the test's output (one "kernel-fact: key=value"
// line each, also as gtest properties) and checked against the kernel version where a
// version decides it: which of the probe's hooks load and attach, whether the bpf LSM is
// active, and whether BPF_PROG_QUERY on a cgroup returns a revision of its attached
// programs (else the field stays 0: the fallback). The kernel matrix
// (scripts/kernel-matrix.sh) runs it in each guest and collects the lines; here it says
// the same of this host's kernel.
#include <bpf/bpf.h>
#include <fcntl.h>
#include <linux/bpf.h>
#include <sys/syscall.h>
#include <sys/utsname.h>
#include <unistd.h>

#include <cerrno>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <iostream>
#include <sstream>
#include <string>
#include <utility>

#include <gtest/gtest.h>

#include "probe/probe.h"
#include "support/cgroup_sandbox.h"
#include "support/daemon_harness.h"
#include "support/foreign_device_program.h"
#include "support/process.h"
#include "support/sandbox_node.h"
#include "support/temp_dir.h"

namespace gdw::test {
namespace {

void fact(const std::string& key, const std::string& value) {
  std::cout << "kernel-fact: " << key << "=" << value << std::endl;
  ::testing::Test::RecordProperty(key, value);
}

// {major, minor} of the running kernel.
std::pair<int, int> kernel_version() {
  utsname u{};
  ::uname(&u);
  int major = 0, minor = 0;
  std::sscanf(u.release, "%d.%d", &major, &minor);
  return {major, minor};
}
bool at_least(int major, int minor) { return kernel_version() >= std::pair{major, minor}; }

std::string release() {
  utsname u{};
  ::uname(&u);
  return u.release;
}

// BPF_PROG_QUERY's and BPF_PROG_ATTACH's attrs as Linux 6.17 lays them out (Debian 12's
// <linux/bpf.h> predates the revision fields). Passed inside a whole union bpf_attr: on
// 6.17+ the query writes `revision` past what an older, shorter attr holds.
struct QueryAttr617 {
  std::uint32_t target_fd, attach_type, query_flags, attach_flags;
  alignas(8) std::uint64_t prog_ids;
  std::uint32_t prog_cnt, pad;
  std::uint64_t prog_attach_flags, link_ids, link_attach_flags, revision;
};
static_assert(offsetof(QueryAttr617, revision) == 56);
struct AttachAttr617 {
  std::uint32_t target_fd, attach_bpf_fd, attach_type, attach_flags, replace_bpf_fd, relative_fd;
  std::uint64_t expected_revision;
};
static_assert(offsetof(AttachAttr617, expected_revision) == 24);
union FullAttr {
  bpf_attr header;  // the size the kernel is given
  QueryAttr617 query;
  AttachAttr617 attach;
};
static_assert(sizeof(FullAttr) == sizeof(bpf_attr));

struct Query {
  int error = 0;  // errno, 0 on success
  std::uint32_t count = 0;
  std::uint64_t revision = 0;
};

Query query_cgroup(int cgroup_fd) {
  FullAttr attr{};
  attr.query.target_fd = static_cast<std::uint32_t>(cgroup_fd);
  attr.query.attach_type = BPF_CGROUP_DEVICE;
  if (::syscall(__NR_bpf, BPF_PROG_QUERY, &attr, sizeof(attr)) != 0) return {errno, 0, 0};
  return {0, attr.query.prog_cnt, attr.query.revision};
}

int attach_expecting(int cgroup_fd, int prog_fd, std::uint64_t expected_revision) {
  FullAttr attr{};
  attr.attach.target_fd = static_cast<std::uint32_t>(cgroup_fd);
  attr.attach.attach_bpf_fd = static_cast<std::uint32_t>(prog_fd);
  attr.attach.attach_type = BPF_CGROUP_DEVICE;
  attr.attach.attach_flags = BPF_F_ALLOW_MULTI;
  attr.attach.expected_revision = expected_revision;
  return ::syscall(__NR_bpf, BPF_PROG_ATTACH, &attr, sizeof(attr)) == 0 ? 0 : errno;
}

std::string errno_name(int err) { return err == 0 ? "ok" : std::string(strerrorname_np(err)); }

TEST(KernelFacts, Kernel) {
  fact("release", release());
  if (::access("/sys/kernel/security/lsm", R_OK) == 0) {
    const std::string lsm = read_file("/sys/kernel/security/lsm");
    fact("lsm", lsm);
    fact("bpf_lsm_active", ("," + lsm + ",").find(",bpf,") != std::string::npos ? "yes" : "no");
  } else {
    fact("lsm", "unknown (securityfs not mounted)");
  }
  fact("btf", ::access("/sys/kernel/btf/vmlinux", R_OK) == 0 ? "yes" : "no");
  std::string kptr = ::access("/proc/sys/kernel/kptr_restrict", R_OK) == 0 ? read_file("/proc/sys/kernel/kptr_restrict") : "?";
  while (!kptr.empty() && kptr.back() == '\n') kptr.pop_back();
  fact("kptr_restrict", kptr);
  fact("cgroup2_root", cgroup2_root());
}

// Which hooks the probe loads and attaches here: the capability hook needs the
// cap_capable tracepoint (6.14+); the attach hook, bpf_kallsyms_lookup_name (5.16+) and
// the kernel's symbols.
TEST(KernelFacts, ProbeHooks) {
  if (!is_root()) GTEST_SKIP() << "needs root: loads BPF programs";
  auto loaded = Probe::load();
  ASSERT_TRUE(loaded) << loaded.error().message;
  Probe& probe = **loaded;
  fact("probe_loaded", "yes");
  fact("capability_hook", probe.capability_hook() ? "attached" : "unavailable");
  fact("rule_writes_need_syscall_hook", probe.rule_writes_need_syscall_hook() ? "yes" : "no");
  // As loaded, before a focus on device programs (v2) takes it off again.
  const bool write_path = probe.write_path_hook();
  fact("write_path_hook", write_path ? "attached" : "off: " + probe.write_path_hook_refusal());
  // The kind chosen (lsm/bpf, fexit, tp_btf/kmalloc) and why each cheaper one was refused.
  fact("attach_hook", probe.attach_hook_choice().describe());
  ASSERT_TRUE(probe.focus(DevicePolicyForm::kPrograms));
  fact("v2_focus", std::string("attach hook ") + (probe.attach_hook() ? "attached" : "off") + ", capability hook " +
                       (probe.capability_hook() ? "attached" : "off"));
  // Rule writers are named without the syscall hook by the cap_capable tracepoint (6.14+)
  // or, before it, by fexit on the devices controller's write path where trampolines load.
  EXPECT_EQ(!probe.rule_writes_need_syscall_hook(), at_least(6, 14) || write_path)
      << "the cap_capable tracepoint came in 6.14; before it, the write path hook";
  if (at_least(5, 16)) {
    EXPECT_TRUE(probe.attach_hook()) << probe.attach_hook_choice().describe();
  }
  ASSERT_TRUE(probe.set_syscall_hook(true));
  fact("syscall_hook", "attached");
}

// BPF_PROG_QUERY's revision of a cgroup's attached device programs: counted per attach
// from 6.17 on (and in some stable kernels before), where an attach with a stale
// expected_revision fails with ESTALE; without it the field is left 0 and the daemon must
// do without it.
TEST(KernelFacts, ProgQueryRevision) {
  if (auto why = v2_device_programs_unavailable(); !why.empty()) GTEST_SKIP() << why;
  CgroupSandbox sandbox("unified", "facts");
  const std::string dir = sandbox.make("c");
  const int cgroup = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  ASSERT_GE(cgroup, 0) << std::strerror(errno);
  const OciDeviceCgroupRule allow_all{true, DeviceRule{DeviceType::kAll, kAnyNumber, kAnyNumber, kAccessAll}};
  ForeignProgram first("gdw_rev_a", {allow_all}), second("gdw_rev_b", {allow_all}), third("gdw_rev_c", {allow_all});
  ASSERT_TRUE(first.fd >= 0 && second.fd >= 0 && third.fd >= 0) << std::strerror(first.load_errno);

  const Query empty = query_cgroup(cgroup);
  ASSERT_EQ(empty.error, 0) << std::strerror(empty.error);
  ASSERT_EQ(first.attach(dir), 0);
  const Query one = query_cgroup(cgroup);
  ASSERT_EQ(second.attach(dir), 0);
  const Query two = query_cgroup(cgroup);
  ASSERT_EQ(one.error, 0);
  ASSERT_EQ(two.error, 0);
  EXPECT_EQ(one.count, 1u);
  EXPECT_EQ(two.count, 2u);
  std::ostringstream revisions;
  revisions << empty.revision << "," << one.revision << "," << two.revision;
  const bool counted = two.revision > one.revision && one.revision > empty.revision;
  fact("query_revision", counted ? "counted (" + revisions.str() + ")"
                                 : "none, fallback (" + revisions.str() + " before and after two attaches)");
  // A stale expected_revision (the one before the last attach).
  const int stale = attach_expecting(cgroup, third.fd, one.revision == 0 ? 12345 : one.revision);
  fact("attach_with_stale_expected_revision", errno_name(stale));
  ::close(cgroup);
  // Either of the two, whole: a revision counted per attach that a stale expectation
  // fails on, or none at all. Upstream counts from 6.17; Debian's 6.12.117 does too.
  if (at_least(6, 17)) {
    EXPECT_TRUE(counted) << revisions.str();
  }
  if (counted) {
    EXPECT_EQ(two.revision, one.revision + 1);
    EXPECT_EQ(stale, ESTALE);
  } else {
    EXPECT_EQ(empty.revision + one.revision + two.revision, 0u) << revisions.str();
  }
}

// The daemon on a v2 sandbox node: its log line on the hooks it attached there and its
// gpu_devwatch_probe_* gauges.
TEST(KernelFacts, TheDaemonsProbeOnAV2Node) {
  if (auto why = SandboxNode::v2_unavailable_reason(); !why.empty()) GTEST_SKIP() << why;
  SandboxNode node(SandboxNode::Options{.v2 = true});
  const auto& c = node.add_container({.pod_namespace = "ml", .pod_name = "facts-0", .container_name = "trainer",
                                      .device_ids = {node.gpu_uuid(0)}});
  node.write_checkpoint();
  DaemonHarness daemon(node);
  ASSERT_TRUE(daemon.start("", /*probe=*/true)) << daemon.output();
  ASSERT_TRUE(daemon.eventually_errno(c, "nvidia0", ENXIO, std::chrono::seconds(20))) << daemon.output();
  ASSERT_TRUE(daemon.process().wait_for_output("eBPF probe on a cgroup v2 node")) << daemon.output();
  // One fact each, the lines joined: a property of the same name would replace the last.
  std::string said, gauges;
  std::istringstream lines(daemon.output());
  for (std::string line; std::getline(lines, line);) {
    if (const auto at = line.find("eBPF probe"); at != std::string::npos) said += (said.empty() ? "" : " | ") + line.substr(at);
  }
  std::istringstream series(daemon.metrics());
  for (std::string line; std::getline(series, line);) {
    if (line.rfind("gpu_devwatch_probe_", 0) == 0 &&
        (line.find("_attached ") != std::string::npos || line.find("_loaded ") != std::string::npos))
      gauges += (gauges.empty() ? "" : ", ") + line.substr(std::string("gpu_devwatch_probe_").size());
  }
  fact("daemon_log", said);
  fact("daemon_probe_gauges", gauges);
  EXPECT_EQ(daemon.metric("gpu_devwatch_probe_loaded"), 1) << daemon.output();
  if (at_least(5, 16)) {
    EXPECT_EQ(daemon.metric("gpu_devwatch_probe_attach_hook_attached"), 1) << daemon.output();
  }
}

}  // namespace
}  // namespace gdw::test
