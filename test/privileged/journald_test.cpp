// Under systemd the daemon logs to the journal with structured fields. No journald runs here,
// so the test gives the daemon a private /run (its own mount namespace) whose
// /run/systemd/journal/socket is a datagram socket the test reads: what arrives there is
// exactly what journald would store.
#include <gtest/gtest.h>

#include <cerrno>

#include "support/daemon_harness.h"

namespace gdw::test {
namespace {

TEST(Journald, RepairsAreLoggedWithPodContainerDeviceAndRuleFields) {
  if (!SandboxNode::available()) GTEST_SKIP() << "needs root and a writable cgroup v1 devices hierarchy";
  SandboxNode node;
  const auto& c = node.add_container({.pod_namespace = "ml", .pod_name = "trainer-0", .container_name = "trainer",
                                      .device_ids = {node.gpu_uuid(0)}});
  node.write_checkpoint();
  TempDir dir("gdw-journal");
  const std::string received = dir / "journal.txt";
  write_file(dir / "journal.py",
             "import os, socket, sys\n"
             "parent = os.getppid()\n"
             "s = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)\n"
             "s.bind(sys.argv[1])\n"
             "s.settimeout(0.2)\n"
             "open(sys.argv[3], 'w').close()\n"
             "with open(sys.argv[2], 'ab', buffering=0) as out:\n"
             "    while os.getppid() == parent:  # ends with the daemon\n"
             "        try:\n"
             "            out.write(s.recv(65536) + b'\\n--\\n')\n"
             "        except socket.timeout:\n"
             "            pass\n");
  const int port = free_port();
  const std::string config = node.write_config("metrics:\n  listen: 127.0.0.1:" + std::to_string(port) +
                                               "\nprobe:\n  enabled: false\n");
  // In the namespace: a tmpfs /run with the journal socket, then the daemon with stderr
  // marked as connected to the journal (JOURNAL_STREAM=<dev>:<inode> of its stderr).
  const std::string script =
      "mount -t tmpfs tmpfs /run && mkdir -p /run/systemd/journal || exit 1; "
      "python3 " + dir / "journal.py" + " /run/systemd/journal/socket " + received + " " + dir / "ready" + " & "
      "while [ ! -e " + dir / "ready" + " ]; do sleep 0.05; done; "
      "export JOURNAL_STREAM=$(stat -L -c '%d:%i' /proc/$$/fd/2); "
      "exec " GDW_BINARY " run --config " + config;
  BackgroundProcess daemon({"unshare", "-m", "--propagation", "private", "sh", "-c", script});
  ASSERT_TRUE(eventually([&] { return !http_get(port).empty(); }, std::chrono::seconds(15))) << daemon.output();

  node.reapply_spec(c);
  ASSERT_TRUE(eventually([&] { return node.open_errno(c, "nvidia0") == ENXIO; })) << daemon.output();
  std::string journal;
  ASSERT_TRUE(eventually([&] {
    journal = read_file(received);
    return journal.find("MESSAGE=granted back") != std::string::npos;
  })) << journal << daemon.output();
  const std::string entry = journal.substr(journal.rfind("--\n", journal.find("MESSAGE=granted back")) + 3);
  for (const char* field : {"NAMESPACE=ml\n", "POD=trainer-0\n", "CONTAINER=trainer\n", "DEVICE=nvidia0,",
                            "RULE=c 195:0 rw;", "PRIORITY=6\n", "SYSLOG_IDENTIFIER=gpu-devwatch\n"})
    EXPECT_NE(entry.find(field), std::string::npos) << field << " in\n" << entry.substr(0, entry.find("--\n"));
  EXPECT_NE(entry.find("CGROUP=" + c.cgroup_dir), std::string::npos);
  // Nothing about the repair went to the (journal-connected) stderr as text instead.
  EXPECT_EQ(daemon.output().find("granted back"), std::string::npos) << daemon.output();
  daemon.signal(SIGTERM);
  EXPECT_EQ(daemon.wait(std::chrono::seconds(10)), 0);
}

}  // namespace
}  // namespace gdw::test
