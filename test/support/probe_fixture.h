// The probe as the privileged probe tests load it (privileged/probe_*_test.cpp), and the
// small things they all need: the fixtures for the default probe, the probe with its
// syscall hook attached, and the probe of a kernel without the cap_capable tracepoint; and
// a rule write to a v1 devices file from a child process, seen by its pid.
#pragma once

#include <fcntl.h>
#include <linux/capability.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/uio.h>
#include <sys/sysmacros.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdint>
#include <cstring>
#include <memory>
#include <optional>
#include <string>

#include <gtest/gtest.h>

#include "probe/probe.h"
#include "support/cgroup_sandbox.h"
#include "support/probe_event_log.h"
#include "support/process.h"

namespace gdw::test {

constexpr std::uint32_t kGpuMajor = 195;  // nvidia's fixed char major; no driver behind it here

inline std::uint64_t inode_of(const std::string& path) {
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0) ADD_FAILURE() << "stat " << path << ": " << std::strerror(errno);
  return st.st_ino;
}

inline std::string own_comm() {
  std::string comm = read_file("/proc/self/comm");
  while (!comm.empty() && comm.back() == '\n') comm.pop_back();
  return comm;
}

// This process's cgroup v2 directory, from the "0::<path>" line of /proc/self/cgroup.
inline std::string own_v2_cgroup_dir() {
  std::string cgroups = read_file("/proc/self/cgroup");
  auto at = cgroups.find("0::");
  std::string rel = cgroups.substr(at + 3, cgroups.find('\n', at) - at - 3);
  return cgroup2_root() + rel;
}

inline void make_char_node(const std::string& path, unsigned major_number, unsigned minor_number) {
  ASSERT_EQ(::mknod(path.c_str(), S_IFCHR | 0666, makedev(major_number, minor_number)), 0)
      << "mknod " << path << ": " << std::strerror(errno);
}

// The probe as the daemon loads it by default: the syscall hook detached.
class ProbeTest : public ::testing::Test {
 protected:
  virtual ProbeOptions options() const { return {}; }

  void SetUp() override {
    if (!is_root()) GTEST_SKIP() << "needs root: loads BPF programs and creates cgroups";
    auto loaded = Probe::load(options());
    if (!loaded) {
      const std::string& why = loaded.error().message;
      if (why.find("permission denied") != std::string::npos || why.find("BTF is not available") != std::string::npos) {
        GTEST_SKIP() << "probe cannot load here: " << why;
      }
      FAIL() << "probe failed to load: " << why;
    }
    probe_ = std::move(*loaded);
    log_.emplace(*probe_);
  }

  std::unique_ptr<Probe> probe_;
  std::optional<EventLog> log_;
};

// The syscall hook attached, as the daemon does while a GPU container misses devices.
class ProbeWithHookTest : public ProbeTest {
 protected:
  ProbeOptions options() const override { return {.use_capability_tracepoint = true, .syscall_hook = true}; }
};

// As on a kernel without the cap_capable tracepoint (< 6.14) that refuses BPF trampolines:
// everything at syscall exit.
class ProbeAtSyscallExitTest : public ProbeTest {
 protected:
  ProbeOptions options() const override {
    return {.use_capability_tracepoint = false, .syscall_hook = true, .write_path_hook = false};
  }
};

// ---- rule writes from a child (v1) -------------------------------------------------------

enum class WriteCall { kWrite, kPwrite, kWritev };

struct WriterRun {
  pid_t pid = -1;
  long result = 0;  // what the syscall returned in the child: bytes or -errno
};

// Clears CAP_SYS_ADMIN from the calling thread's effective set (root keeps its uid, so
// opening root's files still works).
inline bool drop_effective_sys_admin() {
  __user_cap_header_struct header{_LINUX_CAPABILITY_VERSION_3, 0};
  __user_cap_data_struct data[2] = {};
  if (::syscall(SYS_capget, &header, data) != 0) return false;
  data[CAP_SYS_ADMIN / 32].effective &= ~(1u << (CAP_SYS_ADMIN % 32));
  return ::syscall(SYS_capset, &header, data) == 0;
}

// A child named "gdw-rule-writer" joins `writer_cgroup` (devices hierarchy) and writes
// `rule` to `file` with the given syscall (after dropping CAP_SYS_ADMIN, if asked).
inline WriterRun write_rule_from_child(const std::string& writer_cgroup, const std::string& file, const std::string& rule,
                                WriteCall call, bool without_sys_admin = false) {
  int report[2];
  if (::pipe2(report, O_CLOEXEC) != 0) return {};
  pid_t pid = ::fork();
  if (pid == 0) {
    ::prctl(PR_SET_NAME, "gdw-rule-writer");
    long result = -1000;
    if (test::move_to_cgroup(writer_cgroup, ::getpid()) == 0) {
      int fd = ::open(file.c_str(), O_WRONLY | O_CLOEXEC);
      if (fd >= 0 && without_sys_admin && !drop_effective_sys_admin()) {
        ::close(fd);
        fd = -1;
      }
      if (fd >= 0) {
        ssize_t n = -1;
        switch (call) {
          case WriteCall::kWrite: n = ::write(fd, rule.data(), rule.size()); break;
          case WriteCall::kPwrite: n = ::pwrite(fd, rule.data(), rule.size(), 0); break;
          case WriteCall::kWritev: {
            iovec iov{const_cast<char*>(rule.data()), rule.size()};
            n = ::writev(fd, &iov, 1);
            break;
          }
        }
        result = n < 0 ? -errno : n;
      }
    }
    (void)!::write(report[1], &result, sizeof(result));
    _exit(0);
  }
  ::close(report[1]);
  WriterRun run{pid, -2000};
  (void)!::read(report[0], &run.result, sizeof(run.result));
  ::close(report[0]);
  ::waitpid(pid, nullptr, 0);
  return run;
}

}  // namespace gdw::test
