// A tenant cannot stall the daemon's loop through its probe (issue 10, item 3): denied opens
// in a GPU container, however many and whatever path they name, never delay another
// container's repair, and no path a tenant passed to open() is looked up by the daemon.
// The daemon runs with probe.syscall_hook: always, as `auto` does on kernels before 6.14.
#include <gtest/gtest.h>
#include <fcntl.h>
#include <grp.h>
#include <linux/filter.h>
#include <linux/seccomp.h>
#include <stddef.h>
#include <sched.h>
#include <signal.h>
#include <sys/mount.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <functional>
#include <sstream>
#include <thread>
#include <vector>

#include "support/daemon_fixture.h"

namespace gdw::test {
namespace {

using Clock = std::chrono::steady_clock;
constexpr uid_t kNobody = 65534;

// Runs `body` in a child that first moves into `cgroup_dir`; the child reports one int
// (an errno) through a pipe once `body` says so, and lives until released or killed.
class Tenant {
 public:
  // `body` gets the fd to write its one report to and must not return until it may exit.
  Tenant(const std::string& cgroup_dir, const std::function<void(int report_fd)>& body) {
    int report[2];
    if (::pipe2(report, O_CLOEXEC) != 0) return;
    pid_ = ::fork();
    if (pid_ == 0) {
      ::close(report[0]);
      ::prctl(PR_SET_PDEATHSIG, SIGKILL);
      int err = 255;
      if (move_to_cgroup(cgroup_dir, ::getpid()) != 0) {
        (void)!::write(report[1], &err, sizeof(err));
        _exit(1);
      }
      body(report[1]);
      _exit(0);
    }
    ::close(report[1]);
    if (pid_ > 0 && ::read(report[0], &reported_, sizeof(reported_)) != sizeof(reported_)) reported_ = -1;
    ::close(report[0]);
  }
  ~Tenant() { stop(); }
  Tenant(const Tenant&) = delete;
  Tenant& operator=(const Tenant&) = delete;

  void stop() {
    if (pid_ <= 0) return;
    ::kill(pid_, SIGKILL);  // our own child, by PID
    ::waitpid(pid_, nullptr, 0);
    pid_ = -1;
  }
  int reported() const { return reported_; }

 private:
  pid_t pid_ = -1;
  int reported_ = -1;
};

void drop_to_nobody() {
  if (::setgroups(0, nullptr) != 0 || ::setgid(kNobody) != 0 || ::setuid(kNobody) != 0) _exit(3);
}

void report(int fd, int err) { (void)!::write(fd, &err, sizeof(err)); }

std::map<std::string, std::string> labels_of(const SandboxContainer& c, const std::string& device) {
  return {{"namespace", c.spec.pod_namespace}, {"pod", c.spec.pod_name}, {"container", c.spec.container_name},
          {"device", device}};
}

bool lists_device(const std::string& devices_list, const std::string& numbers) {
  std::istringstream lines(devices_list);
  for (std::string line; std::getline(lines, line);)
    if (line.rfind("c " + numbers + " ", 0) == 0) return true;
  return false;
}

double percentile(std::vector<double> values, double p) {
  std::sort(values.begin(), values.end());
  if (values.empty()) return 0;
  return values[std::min(values.size() - 1, static_cast<std::size_t>(p * static_cast<double>(values.size())))];
}

class TenantAgainstTheLoop : public DaemonTest {
 protected:
  void SetUp() override {
    DaemonTest::SetUp();
    if (!set_up()) return;
    tenant_ = &node_->add_container({.pod_namespace = "tenant", .pod_name = "noisy-0", .container_name = "noisy",
                                     .device_ids = {node_->gpu_uuid(0)}});
    victim_ = &node_->add_container({.pod_namespace = "ml", .pod_name = "trainer-0", .container_name = "trainer",
                                     .device_ids = {node_->gpu_uuid(1)}});
    node_->write_checkpoint();
    // Many revocations in a row must all be repaired at once, not rate-limited.
    ASSERT_TRUE(daemon_->start("repair:\n  burst: 10000\n  max_per_minute: 600000\n", /*probe=*/true, "",
                               "  syscall_hook: always\n"))
        << daemon_->output();
    if (daemon_->metric("gpu_devwatch_probe_loaded") != 1)
      GTEST_SKIP() << "the eBPF probe could not load here:\n" << daemon_->output();
    ASSERT_EQ(daemon_->metric("gpu_devwatch_probe_syscall_hook_attached"), 1);
  }

  // Revokes the victim's GPU (nvidia1, 195:1) as a revoker would and returns how long
  // until devices.list lists it again, or nullopt after `timeout`.
  std::optional<double> revoke_and_time_repair(std::chrono::milliseconds timeout) {
    const auto start = Clock::now();
    if (node_->cgroups().deny(victim_->cgroup_rel, "c 195:1 rwm") != 0) return std::nullopt;
    while (Clock::now() - start < timeout) {
      if (lists_device(node_->cgroups().devices_list(victim_->cgroup_rel), "195:1"))
        return std::chrono::duration<double, std::milli>(Clock::now() - start).count();
      std::this_thread::sleep_for(std::chrono::microseconds(200));
    }
    return std::nullopt;
  }

  const SandboxContainer* tenant_ = nullptr;
  const SandboxContainer* victim_ = nullptr;
};

// The reproduction from the issue: an unprivileged process in one GPU container opens a
// file it does not own with O_NOATIME (EPERM) in a tight loop while another container is
// revoked about three times a second. Before, every such open was a ring-buffer record
// the loop stat()ed, at a higher priority than inotify: repairs took seconds.
TEST_F(TenantAgainstTheLoop, AnEpermFloodDoesNotDelayAnotherContainersRepair) {
  TempDir dir("gdw-noatime");
  ASSERT_EQ(::chmod(dir.path().c_str(), 0755), 0);
  const std::string file = dir.path() + "/root-owned";
  { std::ofstream(file) << "not yours\n"; }
  ASSERT_EQ(::chmod(file.c_str(), 0644), 0);

  ASSERT_TRUE(lists_device(node_->cgroups().devices_list(victim_->cgroup_rel), "195:1"));
  Tenant flood(tenant_->cgroup_dir, [&](int report_fd) {
    drop_to_nobody();
    int fd = ::open(file.c_str(), O_RDONLY | O_NOATIME | O_CLOEXEC);
    report(report_fd, fd >= 0 ? 0 : errno);
    for (;;) {
      fd = ::open(file.c_str(), O_RDONLY | O_NOATIME | O_CLOEXEC);
      if (fd >= 0) ::close(fd);
    }
  });
  ASSERT_EQ(flood.reported(), EPERM) << "the flood's open must fail with EPERM";
  std::this_thread::sleep_for(std::chrono::milliseconds(300));  // let it run at full speed

  std::vector<double> latencies_ms;
  int unrepaired = 0;
  for (int i = 0; i < 10; ++i) {
    auto took = revoke_and_time_repair(std::chrono::seconds(5));
    if (took)
      latencies_ms.push_back(*took);
    else
      ++unrepaired;
    std::this_thread::sleep_for(std::chrono::milliseconds(300));
  }
  const double flood_counted = daemon_->metric("gpu_devwatch_denied_opens_total", labels_of(*tenant_, "other"));
  flood.stop();

  const double max_ms = latencies_ms.empty() ? 0 : *std::max_element(latencies_ms.begin(), latencies_ms.end());
  std::printf("repair latency under an EPERM flood: %zu repairs, median %.2f ms, p90 %.2f ms, max %.2f ms, "
              "%d not repaired within 5 s; flood opens counted as other: %.0f; daemon repair_duration "
              "sum %.4f s over %.0f repairs\n",
              latencies_ms.size(), percentile(latencies_ms, 0.5), percentile(latencies_ms, 0.9), max_ms, unrepaired,
              flood_counted, daemon_->metric("gpu_devwatch_repair_duration_seconds_sum"),
              daemon_->metric("gpu_devwatch_repair_duration_seconds_count"));
  EXPECT_EQ(unrepaired, 0) << daemon_->output();
  // Before: 1.8 s median, 9 s max. Unloaded, a repair takes under a millisecond; the flood
  // keeps one CPU busy, and on a small shared test machine a single measurement can catch
  // the scheduler (tens of ms): the median is the strict bound, the maximum a loose one.
  EXPECT_LT(percentile(latencies_ms, 0.5), 10.0) << "a tenant's EPERM flood delayed another container's repair";
  EXPECT_LT(max_ms, 500.0) << "a tenant's EPERM flood delayed another container's repair";
  // The flood was seen, counted in the kernel: thousands of opens, no per-open record.
  EXPECT_TRUE(eventually([&] {
    return daemon_->metric("gpu_devwatch_denied_opens_total", labels_of(*tenant_, "other")) >= 1000;
  })) << daemon_->metrics();
  EXPECT_EQ(daemon_->metric("gpu_devwatch_denied_opens_total", labels_of(*tenant_, "nvidia0")), -1);
  EXPECT_LE(daemon_->metric("gpu_devwatch_probe_ring_buffer_drops_total"), 0) << "the flood filled a ring buffer";
}

// A seccomp filter that makes openat fail with EPERM without looking its path up.
bool fail_openat_with_eperm() {
  sock_filter filter[] = {
      BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(seccomp_data, nr)),
      BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, SYS_openat, 0, 1),
      BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ERRNO | EPERM),
      BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW),
  };
  sock_fprog program{static_cast<unsigned short>(std::size(filter)), filter};
  return ::prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) == 0 && ::prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, &program) == 0;
}

// A denied open naming a path on a hung file system: a FUSE mount whose server never
// answers (a tenant can mount one itself in its own user namespace). The tenant's own open
// fails with EPERM before any lookup (its seccomp filter). Before, the daemon stat()ed
// /proc/<pid>/root/<path> on its loop and hung there for good: no repair anywhere on the
// node. Now the open is counted as `other` in the kernel and nothing looks the path up.
TEST_F(TenantAgainstTheLoop, ADeniedOpenOnAHungMountNeverBlocksTheLoop) {
  int fuse = ::open("/dev/fuse", O_RDWR | O_CLOEXEC);
  if (fuse < 0) GTEST_SKIP() << "no /dev/fuse: " << std::strerror(errno);
  TempDir dir("gdw-hung");
  const std::string mount_point = dir.path() + "/mnt";
  ASSERT_EQ(::mkdir(mount_point.c_str(), 0755), 0);
  // Closing the connection's fd first aborts it: anything stuck in it returns (ENOTCONN).
  struct CloseFirst {
    int fd;
    ~CloseFirst() { ::close(fd); }
  };
  {
    Tenant tenant(tenant_->cgroup_dir, [&](int report_fd) {
      // Its own mount namespace: the hung mount exists only in its view.
      if (::unshare(CLONE_NEWNS) != 0 || ::mount(nullptr, "/", nullptr, MS_REC | MS_PRIVATE, nullptr) != 0) {
        report(report_fd, 254);
        _exit(1);
      }
      const std::string options = "fd=" + std::to_string(fuse) + ",rootmode=40000,user_id=0,group_id=0";
      if (::mount("gdw-hung", mount_point.c_str(), "fuse", MS_NOSUID | MS_NODEV, options.c_str()) != 0) {
        report(report_fd, 253);
        _exit(1);
      }
      ::close(fuse);
      drop_to_nobody();
      if (!fail_openat_with_eperm()) {
        report(report_fd, 252);
        _exit(1);
      }
      long fd = ::syscall(SYS_openat, AT_FDCWD, (mount_point + "/nvidia0").c_str(), O_RDONLY);
      report(report_fd, fd >= 0 ? 0 : errno);
      ::pause();  // alive: its /proc/<pid>/root still leads into the hung mount
    });
    CloseFirst aborts_the_mount{fuse};
    ASSERT_EQ(tenant.reported(), EPERM) << "the tenant's setup failed (254 unshare, 253 mount, 252 seccomp)";

    EXPECT_TRUE(eventually([&] {
      return daemon_->metric("gpu_devwatch_denied_opens_total", labels_of(*tenant_, "other")) == 1;
    }, std::chrono::seconds(5))) << "the denied open was not counted as other\n" << daemon_->metrics();
    auto took = revoke_and_time_repair(std::chrono::seconds(5));
    EXPECT_TRUE(took) << "the loop is stuck: another container's revocation was not repaired\n" << daemon_->output();
    if (took) std::printf("repair after a denied open on a hung mount: %.2f ms\n", *took);
    EXPECT_EQ(daemon_->metric("gpu_devwatch_denied_opens_total", labels_of(*tenant_, "nvidia0")), -1);
  }
  EXPECT_EQ(daemon_->stop(), 0) << daemon_->output();
}

// The registered path of a GPU that is not the container's is a GPU open, counted as other;
// the container's own GPU opens (ENXIO here: allowed, no driver) are not denials.
TEST_F(TenantAgainstTheLoop, AnotherContainersGpuCountsAsOther) {
  EXPECT_EQ(node_->open_errno(*tenant_, "nvidia1"), EPERM);  // the victim's GPU
  EXPECT_EQ(node_->open_errno(*tenant_, "nvidia0"), ENXIO);
  EXPECT_TRUE(eventually([&] {
    return daemon_->metric("gpu_devwatch_denied_opens_total", labels_of(*tenant_, "other")) == 1;
  })) << daemon_->metrics();
  EXPECT_TRUE(daemon_->process().wait_for_output("open(" + node_->node_path("nvidia1") + ") of c 195:1 denied"))
      << daemon_->output();
  EXPECT_EQ(daemon_->metric("gpu_devwatch_denied_opens_total", labels_of(*tenant_, "nvidia0")), -1);
}

}  // namespace
}  // namespace gdw::test
