// A bounded soak (about a minute): a revoker loop against many containers, with pods
// coming and going, while the daemon runs. Afterwards nothing is missing and the daemon's
// file descriptors and memory have not grown.
#include <gtest/gtest.h>
#include <dirent.h>

#include <cerrno>
#include <random>
#include <sstream>
#include <string>
#include <thread>

#include "support/daemon_harness.h"
#include "support/process_usage.h"

namespace gdw::test {
namespace {

// The daemon's error lines: what an unexpected gpu_devwatch_event_loop_errors_total was
// (its whole log here is tens of thousands of repairs).
std::string error_lines(const std::string& log) {
  std::istringstream in(log);
  std::string line, out;
  while (std::getline(in, line))
    if (line.find(" error ") != std::string::npos) out += line + "\n";
  return out;
}

// The daemon's open descriptors: the cgroup rule files it keeps open per watched container
// (backend/devices_v1_files.h) apart, with whether each still names an existing file.
struct OpenFds {
  std::size_t other = 0;
  std::size_t rule_files = 0;
  std::size_t rule_files_of_removed = 0;
};

OpenFds open_fds(pid_t pid) {
  OpenFds n;
  const std::string dir = "/proc/" + std::to_string(pid) + "/fd";
  if (DIR* d = ::opendir(dir.c_str())) {
    while (dirent* e = ::readdir(d)) {
      if (e->d_name[0] == '.') continue;
      char target[4096];
      ssize_t len = ::readlink((dir + "/" + e->d_name).c_str(), target, sizeof target - 1);
      const std::string path(target, len > 0 ? static_cast<std::size_t>(len) : 0);
      const bool rule_file = path.ends_with("/devices.list") || path.ends_with("/devices.allow") ||
                             path.ends_with("/devices.list (deleted)") || path.ends_with("/devices.allow (deleted)");
      if (!rule_file) {
        ++n.other;
        continue;
      }
      ++n.rule_files;
      n.rule_files_of_removed += ::access(path.c_str(), F_OK) != 0;
    }
    ::closedir(d);
  }
  return n;
}

TEST(Soak, RevokerLoopAgainstManyContainers) {
  if (!SandboxNode::available()) GTEST_SKIP() << "needs root and a writable cgroup v1 devices hierarchy";
  const auto duration = std::chrono::seconds(std::getenv("GDW_SOAK_SECONDS") ? std::atoi(std::getenv("GDW_SOAK_SECONDS")) : 45);
  SandboxNode node;
  constexpr int kContainers = 40;
  for (int i = 0; i < kContainers; ++i)
    node.add_container({.pod_namespace = "soak", .pod_name = "p" + std::to_string(i), .container_name = "c",
                        .device_ids = {node.gpu_uuid(i % 2)}});
  node.write_checkpoint();
  DaemonHarness daemon(node);
  ASSERT_TRUE(daemon.start()) << daemon.output();
  const pid_t pid = daemon.process().pid();

  std::mt19937 rng(42);
  auto pick = [&]() -> const SandboxContainer& {
    auto it = node.containers().begin();
    std::advance(it, rng() % node.containers().size());
    return *it;
  };
  // Warm up (allocator pools, every series created once), then take the baseline
  // with no scrape in flight.
  for (int i = 0; i < 400; ++i) node.reapply_spec(pick());
  std::this_thread::sleep_for(std::chrono::seconds(2));
  const OpenFds fds_before = open_fds(pid);
  const long rss_before = rss_anon_kib(pid);

  std::size_t revocations = 0, churned = 0;
  const auto end = std::chrono::steady_clock::now() + duration;
  while (std::chrono::steady_clock::now() < end) {
    const auto& c = pick();
    if (rng() % 2) {
      node.reapply_spec(c);
    } else {
      // runc ≥ rc91 style: one explicit deny of the GPU rule
      node.cgroups().deny(c.cgroup_rel, c.spec.device_ids[0] == node.gpu_uuid(0) ? "c 195:0 rw" : "c 195:1 rw");
    }
    ++revocations;
    if (revocations % 200 == 0) {  // a pod goes, another comes
      SandboxContainerSpec spec = c.spec;
      spec.pod_uid.clear();
      spec.pod_name = "churn" + std::to_string(churned++);
      node.remove_container(c);
      node.add_container(spec);
      node.write_checkpoint();
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }

  // Every container ends with what it must have.
  for (const auto& c : node.containers()) {
    const std::string gpu = c.spec.device_ids[0] == node.gpu_uuid(0) ? "nvidia0" : "nvidia1";
    EXPECT_TRUE(daemon.eventually_errno(c, gpu, ENXIO, std::chrono::seconds(5))) << c.cgroup_dir;
    EXPECT_EQ(node.open_errno(c, "nvidia-uvm"), ENXIO) << c.cgroup_dir;
  }
  // Measured before any further HTTP request: a scrape holds a socket for a moment.
  const OpenFds fds_after = open_fds(pid);
  const long rss_after = rss_anon_kib(pid);
  EXPECT_TRUE(eventually([&] { return daemon.metric("gpu_devwatch_containers_missing_devices") == 0; }));
  EXPECT_EQ(daemon.metric("gpu_devwatch_containers_watched"), kContainers);
  EXPECT_EQ(daemon.metric("gpu_devwatch_event_loop_errors_total"), -1)
      << error_lines(daemon.output()) << daemon.metrics();

  std::printf("soak: %zu revocations, %zu pods replaced, fds %zu -> %zu (+ rule files %zu -> %zu), RssAnon %ld -> %ld "
              "KiB\n",
              revocations, churned, fds_before.other, fds_after.other, fds_before.rule_files, fds_after.rule_files,
              rss_before, rss_after);
  EXPECT_EQ(fds_after.other, fds_before.other);
  EXPECT_LE(fds_after.rule_files, 2u * kContainers) << "two kept per GPU container at most";
  EXPECT_EQ(fds_after.rule_files_of_removed, 0u) << "the files of removed containers are closed";
  EXPECT_LT(rss_after - rss_before, 2048) << "anonymous memory grew by more than 2 MiB";
  EXPECT_EQ(daemon.stop(), 0);
}

}  // namespace
}  // namespace gdw::test
