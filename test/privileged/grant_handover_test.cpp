// daemon.grant_handover_us on the real daemon and kernel, v2 and v1: after a grant the event
// loop gives its CPU away before it reports (service/cpu_handover.h), so a tenant that shares
// the daemon's CPU, and whose harmful call the repair's wake-up preempted, opens its GPU
// before the daemon has logged the grant. With the handover off (0) the same rounds are the
// control: the daemon logs first, the tenant waits for the whole repair.
//
// The daemon's event loop thread and the tenant are pinned to one CPU. The tenant makes the
// harm itself (v2: a spec-only program ANDed on, as systemd re-applies; v1: `a` to
// devices.deny), then opens its GPU node until it is allowed (ENXIO), noting CLOCK_REALTIME
// as that open starts; the daemon's "granted back" log line carries its own time (UTC, µs),
// taken on the event loop thread.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <linux/bpf.h>
#include <sched.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <sstream>
#include <string>
#include <thread>

#include "support/daemon_harness.h"
#include "support/foreign_device_program.h"

namespace gdw::test {
namespace {

using namespace std::chrono_literals;

constexpr int kRounds = 8;

struct TenantResult {
  int err = 0;                 // 0: its GPU opened (ENXIO) after the harm
  long long allowed_us = 0;    // CLOCK_REALTIME at the start of that open
};

struct Harm {
  std::string procs;      // the container's cgroup.procs
  std::string deny;       // v1: its devices.deny (empty on v2)
  std::string node;       // its GPU's node
  int cgroup_fd = -1;     // v2: its cgroup directory
  int program_fd = -1;    // v2: the spec-only program the tenant attaches
  int cpu = 0;
};

// The tenant: a child that only makes system calls (it is forked from a test process).
[[noreturn]] void tenant(const Harm& h, int out) {
  TenantResult r;
  cpu_set_t set;
  CPU_ZERO(&set);
  CPU_SET(h.cpu, &set);
  if (::sched_setaffinity(0, sizeof set, &set) != 0) r.err = errno;
  const int procs = r.err ? -1 : ::open(h.procs.c_str(), O_WRONLY | O_CLOEXEC);
  if (!r.err && (procs < 0 || ::write(procs, "0", 1) != 1)) r.err = errno;
  if (procs >= 0) ::close(procs);
  if (!r.err && h.deny.empty()) {
    union bpf_attr attr;
    std::memset(&attr, 0, sizeof attr);
    attr.target_fd = static_cast<std::uint32_t>(h.cgroup_fd);
    attr.attach_bpf_fd = static_cast<std::uint32_t>(h.program_fd);
    attr.attach_type = BPF_CGROUP_DEVICE;
    attr.attach_flags = BPF_F_ALLOW_MULTI;
    if (::syscall(SYS_bpf, BPF_PROG_ATTACH, &attr, sizeof attr) != 0) r.err = errno;
  } else if (!r.err) {
    const int deny = ::open(h.deny.c_str(), O_WRONLY | O_CLOEXEC);
    if (deny < 0 || ::write(deny, "a", 1) != 1) r.err = errno;
    if (deny >= 0) ::close(deny);
  }
  struct timespec start, now, at;
  ::clock_gettime(CLOCK_MONOTONIC, &start);
  while (!r.err) {
    ::clock_gettime(CLOCK_REALTIME, &at);
    const int fd = ::open(h.node.c_str(), O_RDONLY | O_CLOEXEC);
    const int e = fd < 0 ? errno : 0;
    if (fd >= 0) ::close(fd);
    if (e != EPERM) {
      r.err = e == ENXIO ? 0 : (e ? e : EEXIST);
      r.allowed_us = at.tv_sec * 1000000LL + at.tv_nsec / 1000;
      break;
    }
    ::clock_gettime(CLOCK_MONOTONIC, &now);
    if (now.tv_sec - start.tv_sec > 5) r.err = ETIMEDOUT;
  }
  (void)!::write(out, &r, sizeof r);
  ::_exit(0);
}

TenantResult run_tenant(const Harm& h) {
  int p[2];
  if (::pipe2(p, O_CLOEXEC) != 0) return {errno, 0};
  const pid_t pid = ::fork();
  if (pid == 0) tenant(h, p[1]);
  ::close(p[1]);
  TenantResult r{ECHILD, 0};
  if (pid < 0 || ::read(p[0], &r, sizeof r) != static_cast<ssize_t>(sizeof r)) r.err = ECHILD;
  ::close(p[0]);
  if (pid > 0) ::waitpid(pid, nullptr, 0);
  return r;
}

// "2026-11-29T21:38:35.375440Z info granted back ...": the time of each such line, in µs.
std::vector<long long> grant_log_times(const std::string& output) {
  std::vector<long long> times;
  std::istringstream in(output);
  for (std::string line; std::getline(in, line);) {
    if (line.find("granted back") == std::string::npos) continue;
    struct tm tm{};
    int micros = 0;
    if (std::sscanf(line.c_str(), "%4d-%2d-%2dT%2d:%2d:%2d.%6dZ", &tm.tm_year, &tm.tm_mon, &tm.tm_mday, &tm.tm_hour,
                    &tm.tm_min, &tm.tm_sec, &micros) != 7)
      continue;
    tm.tm_year -= 1900;
    tm.tm_mon -= 1;
    times.push_back(static_cast<long long>(::timegm(&tm)) * 1000000LL + micros);
  }
  return times;
}

class GrantHandover : public ::testing::TestWithParam<bool> {
 protected:
  void SetUp() override {
    v2_ = GetParam();
    if (v2_) {
      if (auto why = SandboxNode::v2_unavailable_reason(); !why.empty()) GTEST_SKIP() << why;
    } else if (!SandboxNode::available()) {
      GTEST_SKIP() << "needs root and the v1 devices hierarchy";
    }
    node_ = std::make_unique<SandboxNode>(SandboxNode::Options{.gpus = 1, .v2 = v2_});
    gpu_ = &node_->add_container({.pod_namespace = "ml", .pod_name = "trainer", .container_name = "trainer",
                                  .device_ids = {node_->gpu_uuid(0)}});
    node_->write_checkpoint();
    cpu_set_t mine;
    ASSERT_EQ(::sched_getaffinity(0, sizeof mine, &mine), 0);
    while (!CPU_ISSET(cpu_, &mine)) ++cpu_;
  }

  // Rounds of harm by a tenant on the daemon's CPU; how many opened their GPU before the
  // daemon logged the grant.
  int tenant_first(const std::string& extra) {
    DaemonHarness daemon(*node_);
    EXPECT_TRUE(daemon.start("repair:\n  log_burst: 100\n" + extra, /*probe=*/true)) << daemon.output();
    if (daemon.metric("gpu_devwatch_probe_loaded") != 1) {
      ADD_FAILURE() << "the probe did not load:\n" << daemon.output();
      return -1;
    }
    cpu_set_t one;
    CPU_ZERO(&one);
    CPU_SET(cpu_, &one);
    EXPECT_EQ(::sched_setaffinity(daemon.process().pid(), sizeof one, &one), 0) << "the event loop thread";
    EXPECT_TRUE(daemon.eventually_errno(*gpu_, "nvidia0", ENXIO)) << daemon.output();
    int first = 0;
    for (int round = 0; round < kRounds; ++round) {
      const std::size_t logged = grant_log_times(daemon.output()).size();
      Harm h{gpu_->cgroup_dir + "/cgroup.procs", v2_ ? "" : gpu_->cgroup_dir + "/devices.deny",
             node_->node_path("nvidia0"), -1, -1, cpu_};
      ForeignProgram spec("sd_devices", SandboxNode::spec_rules());  // a new program each time, as systemd loads
      if (v2_) {
        h.cgroup_fd = ::open(gpu_->cgroup_dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
        h.program_fd = spec.fd;
        EXPECT_GE(h.program_fd, 0) << spec.load_errno;
      }
      const TenantResult r = run_tenant(h);
      if (h.cgroup_fd >= 0) ::close(h.cgroup_fd);
      EXPECT_EQ(r.err, 0) << "round " << round << ": " << std::strerror(r.err) << "\n" << daemon.output();
      EXPECT_TRUE(eventually([&] { return grant_log_times(daemon.output()).size() > logged; }))
          << "round " << round << ": no grant logged\n" << daemon.output();
      const auto times = grant_log_times(daemon.output());
      if (r.err == 0 && times.size() > logged) first += r.allowed_us < times.back();
      std::this_thread::sleep_for(150ms);  // the daemon's work after a grant (spare wrappers) done
    }
    EXPECT_EQ(node_->open_errno(*gpu_, "nvidia0"), ENXIO);
    return first;
  }

  bool v2_ = false;
  int cpu_ = 0;
  std::unique_ptr<SandboxNode> node_;
  const SandboxContainer* gpu_ = nullptr;
};

TEST_P(GrantHandover, ATenantOnTheDaemonsCpuHasItsGpuBeforeTheDaemonReports) {
  const int with_handover = tenant_first("");  // the default: 30 us
  const int control = tenant_first("daemon:\n  grant_handover_us: 0\n");
  std::printf("the tenant opened its GPU before the daemon's log line in %d of %d rounds, %d without the handover\n",
              with_handover, kRounds, control);
  EXPECT_GE(with_handover, kRounds - 2) << "of " << kRounds << " rounds, the tenant opened its GPU first";
  EXPECT_LE(control, 2) << "of " << kRounds << " rounds without the handover, the tenant opened its GPU first";
}

INSTANTIATE_TEST_SUITE_P(CgroupVersions, GrantHandover, ::testing::Values(true, false),
                         [](const auto& info) { return info.param ? "v2" : "v1"; });

}  // namespace
}  // namespace gdw::test
