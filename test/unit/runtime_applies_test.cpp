// Runtime updates found without the probe (runtime/runtime_applies.h), for `check --repair`:
// the container a runtime's command line updates, a process's cgroup, and the walk of a
// fixture /proc that counts only a runtime outside the pods' containers.
#include "runtime/runtime_applies.h"

#include <gtest/gtest.h>

#include <algorithm>

#include "runtime/discovery.h"
#include "support/temp_dir.h"

namespace gdw {
namespace {

using namespace std::string_literals;

const std::string kId = "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef";

std::string target(std::string_view cmdline) {
  const auto t = parse_apply_target(cmdline);
  return t ? t->verb + " " + t->container_id : "none";
}

TEST(RuntimeApplies, ACreateOrUpdateNamesItsContainerLast) {
  // containerd's shim: runc's global options, then the subcommand, then the container.
  EXPECT_EQ(target("runc\0--root\0/run/containerd/runc/k8s.io\0--log\0/x/log.json\0--log-format\0json\0"
                   "update\0--resources\0-\0"s + kId + "\0"s),
            "update " + kId);
  EXPECT_EQ(target("runc\0--root\0/r\0--log\0/x/log.json\0--log-format\0json\0--systemd-cgroup\0create\0--bundle\0"
                   "/b\0--pid-file\0/b/init.pid\0"s + kId + "\0"s),
            "create " + kId);
  EXPECT_EQ(target("/usr/bin/crun\0update\0--resources=/tmp/r.json\0"s + kId), "update " + kId);
  // A shell script's interpreter comes first; the script calls itself runc.
  EXPECT_EQ(target("/bin/sh\0/tmp/runc\0update\0"s + kId + "\0"s), "update " + kId);
}

TEST(RuntimeApplies, OtherInvocationsNameNothing) {
  EXPECT_EQ(target("runc\0--root\0/r\0exec\0--process\0/tmp/p.json\0"s + kId), "none");
  EXPECT_EQ(target("runc\0--root\0/r\0state\0"s + kId), "none");
  EXPECT_EQ(target("runc\0--root\0/r\0start\0"s + kId), "none");
  EXPECT_EQ(target("runc\0--root\0/r\0delete\0--force\0"s + kId), "none");
  EXPECT_EQ(target("runc\0update\0"s), "none") << "no container";
  EXPECT_EQ(target("runc\0update\0--resources\0"s), "none") << "an option last";
  EXPECT_EQ(target("update\0"s + kId), "none") << "the program itself is not the subcommand";
  EXPECT_EQ(target(""), "none");
  EXPECT_EQ(target("runc\0update\0\0"s), "none") << "an empty last argument";
}

// "<pid> (<comm>) <state> <ppid> ... <num_threads> ...": 17 fields after the state.
std::string stat_line(const std::string& comm, const std::string& state, int threads) {
  return "4242 (" + comm + ") " + state + " 1 4242 4242 0 -1 4194560 97 0 0 0 3 1 0 0 20 0 " +
         std::to_string(threads) + " 0 123456";
}

TEST(RuntimeApplies, AProcessStillExitsUntilItsLastThreadIsGone) {
  EXPECT_TRUE(parse_stat_still_exiting(stat_line("runc", "R", 7))) << "not yet a zombie";
  EXPECT_TRUE(parse_stat_still_exiting(stat_line("runc", "D", 1)));
  EXPECT_TRUE(parse_stat_still_exiting(stat_line("runc", "Z", 3))) << "a zombie leader, other threads exiting";
  EXPECT_FALSE(parse_stat_still_exiting(stat_line("runc", "Z", 1))) << "all gone but the leader";
  EXPECT_FALSE(parse_stat_still_exiting(stat_line("a) Z 1 (b", "Z", 1))) << "read after the last ')'";
  EXPECT_FALSE(parse_stat_still_exiting("4242 (runc) R 1 2"));
  EXPECT_FALSE(parse_stat_still_exiting("no parenthesis"));
}

TEST(RuntimeApplies, ACgroupIsReadFromItsHierarchysLine) {
  const std::string v2 = "0::/system.slice/containerd.service\n";
  EXPECT_EQ(parse_proc_cgroup(v2, ""), "/system.slice/containerd.service");
  EXPECT_EQ(parse_proc_cgroup(v2, "devices"), std::nullopt);
  const std::string hybrid =
      "12:cpu,cpuacct:/kubepods/podA/c1\n"
      "5:devices:/system.slice/containerd.service\n"
      "1:name=systemd:/system.slice/containerd.service\n"
      "0::/a:b/with:colons\n";
  EXPECT_EQ(parse_proc_cgroup(hybrid, "devices"), "/system.slice/containerd.service");
  EXPECT_EQ(parse_proc_cgroup(hybrid, "cpu"), "/kubepods/podA/c1");
  EXPECT_EQ(parse_proc_cgroup(hybrid, "cpuacct"), "/kubepods/podA/c1");
  EXPECT_EQ(parse_proc_cgroup(hybrid, ""), "/a:b/with:colons");
  EXPECT_EQ(parse_proc_cgroup(hybrid, "memory"), std::nullopt);
  EXPECT_EQ(parse_proc_cgroup("garbage\n5:devices\n5:devices:relative\n", "devices"), std::nullopt);
}

TEST(RuntimeApplies, OnlyARuntimeOutsideThePodsCounts) {
  test::TempDir root("gdw-runtime-applies");
  const std::string update = "runc\0--root\0/r\0update\0--resources\0-\0"s + kId + "\0"s;
  auto process = [&](const std::string& pid, const std::string& comm, const std::string& cmdline,
                     const std::string& cgroup) {
    root.write("proc/" + pid + "/comm", comm + "\n");
    root.write("proc/" + pid + "/cmdline", cmdline);
    root.write("proc/" + pid + "/cgroup", "0::" + cgroup + "\n");
  };
  const std::string pod = "/kubepods/besteffort/pod0a1b2c3d-1111-2222-3333-444455556666";
  process("100", "runc", update, "/system.slice/containerd.service");  // the shim's runc update
  process("101", "crun", "crun\0create\0other"s, "/");                  // another container's create
  process("200", "runc", update, pod + "/" + kId);                      // a tenant's "runc"
  process("201", "sleep", update, "/system.slice/x.service");           // not a runtime's name
  process("202", "runc", "runc\0--root\0/r\0state\0"s + kId, "/system.slice/y");  // not an update
  process("203", "runc", update, pod);                                  // in a pod's own cgroup
  process("204", "runc", "", "/system.slice/z");  // exiting: its command line gone with its memory
  root.write("proc/204/stat", stat_line("runc", "Z", 4));
  process("205", "runc", "", "/system.slice/z");  // exited, not yet reaped
  root.write("proc/205/stat", stat_line("runc", "Z", 1));
  root.write("proc/self/comm", "runc\n");  // not a pid directory
  root.write("proc/300/comm", "runc\n");   // vanished while read

  const KubepodsLocation where{"/sys/fs/cgroup/unified", "kubepods"};
  const auto applies = runtime_applies_at_work(root.path() + "/proc", "", [&](const std::string& path) {
    return inside_a_pod(where, where.hierarchy_root + path);
  });
  std::vector<std::pair<pid_t, std::string>> found;
  for (const auto& a : applies) found.emplace_back(a.pid, a.comm + " " + a.target.verb + " " + a.target.container_id);
  std::sort(found.begin(), found.end());
  const std::vector<std::pair<pid_t, std::string>> expected = {
      {100, "runc update " + kId}, {101, "crun create other"}, {203, "runc update " + kId}, {204, "runc exit "}};
  EXPECT_EQ(found, expected);
}

TEST(RuntimeApplies, InsideAPodIsBelowAPodsDirectory) {
  const KubepodsLocation cgroupfs{"/sys/fs/cgroup/unified", "kubepods"};
  const std::string base = "/sys/fs/cgroup/unified/kubepods";
  const std::string pod = "pod0a1b2c3d-1111-2222-3333-444455556666";
  EXPECT_TRUE(inside_a_pod(cgroupfs, base + "/besteffort/" + pod + "/" + kId));
  EXPECT_TRUE(inside_a_pod(cgroupfs, base + "/" + pod + "/" + kId));
  EXPECT_TRUE(inside_a_pod(cgroupfs, base + "/" + pod + "/" + kId + "/deeper"));
  EXPECT_TRUE(inside_a_pod(cgroupfs, base + "/" + pod + "/not-a-leaf-name"));
  EXPECT_FALSE(inside_a_pod(cgroupfs, base + "/besteffort/" + pod));
  EXPECT_FALSE(inside_a_pod(cgroupfs, base + "/besteffort"));
  EXPECT_FALSE(inside_a_pod(cgroupfs, base));
  EXPECT_FALSE(inside_a_pod(cgroupfs, "/sys/fs/cgroup/unified/system.slice/containerd.service"));
  EXPECT_FALSE(inside_a_pod(cgroupfs, base + "x/" + pod + "/" + kId)) << "kubepodsx is not kubepods";
  const KubepodsLocation systemd{"/sys/fs/cgroup/unified", "kubepods.slice"};
  const std::string pod_slice =
      "/sys/fs/cgroup/unified/kubepods.slice/kubepods-burstable.slice/"
      "kubepods-burstable-pod0a1b2c3d_1111_2222_3333_444455556666.slice";
  EXPECT_TRUE(inside_a_pod(systemd, pod_slice + "/cri-containerd-" + kId + ".scope/container"));
  EXPECT_FALSE(inside_a_pod(systemd, pod_slice));
}

}  // namespace
}  // namespace gdw
