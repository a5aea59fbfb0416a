// The byte layout contract between bpf/devwatch.bpf.c and the daemon, and where a denied
// open is looked up afterwards.
#include "probe/probe_records.h"

#include <fcntl.h>

#include <cstring>
#include <string>
#include <tuple>

#include <gtest/gtest.h>

#include "devwatch_events.h"

namespace gdw {
namespace {

template <class Record>
std::string bytes_of(const Record& record) {
  return std::string(reinterpret_cast<const char*>(&record), sizeof(record));
}

gdw_process sample_process() {
  gdw_process p{};
  p.pid = 4242;
  p.tid = 4243;
  p.parent_pid = 1;
  p.cgroup_id = 7;
  p.devices_cgroup_id = 9;
  p.start_time_ns = 31337;
  p.cpu = 5;
  std::memcpy(p.comm, "runc:[2:INIT]", 13);
  std::memcpy(p.parent_comm, "containerd-shim-", 16);  // all 16 bytes used: no NUL
  return p;
}

TEST(ProbeRecords, RuleWriteWithTrailingNewlineAndFullComm) {
  gdw_rule_write_event raw{};
  raw.header.type = GDW_EVENT_RULE_WRITE;
  raw.header.ktime_ns = 123;
  raw.writer = sample_process();
  raw.target_cgroup_id = 555;
  raw.result = 12;
  raw.result_known = 1;
  raw.seen_at = GDW_SEEN_AT_SYSCALL_EXIT;
  raw.deny = 1;
  raw.rule_len = 12;
  std::memcpy(raw.rule, "c 195:3 rwm\n", 12);

  auto decoded = decode_probe_record(bytes_of(raw));
  ASSERT_TRUE(decoded) << decoded.error().message;
  const auto& event = std::get<RuleWriteEvent>(*decoded);
  EXPECT_EQ(event.rule, "c 195:3 rwm");
  EXPECT_TRUE(event.deny);
  EXPECT_EQ(event.result, 12);
  EXPECT_TRUE(event.seen_at_syscall_exit);
  EXPECT_EQ(event.target_cgroup_id, 555u);
  EXPECT_EQ(event.ktime_ns, 123u);
  EXPECT_EQ(event.writer.pid, 4242);
  EXPECT_EQ(event.writer.tid, 4243);
  EXPECT_EQ(event.writer.comm, "runc:[2:INIT]");
  EXPECT_EQ(event.writer.parent_comm, "containerd-shim-");
  EXPECT_EQ(event.writer.cgroup_id, 7u);
  EXPECT_EQ(event.writer.devices_cgroup_id, 9u);
  EXPECT_EQ(event.writer.start_time_ns, 31337u);
  EXPECT_EQ(event.writer.cpu, 5);
}

TEST(ProbeRecords, RuleWriteSeenAtThePermissionCheckHasNoResultUnlessRefused) {
  gdw_rule_write_event raw{};
  raw.header.type = GDW_EVENT_RULE_WRITE;
  raw.seen_at = GDW_SEEN_AT_PERMISSION_CHECK;
  raw.result = 0;
  raw.result_known = 0;
  auto pending = decode_probe_record(bytes_of(raw));
  ASSERT_TRUE(pending) << pending.error().message;
  EXPECT_FALSE(std::get<RuleWriteEvent>(*pending).seen_at_syscall_exit);
  EXPECT_FALSE(std::get<RuleWriteEvent>(*pending).result.has_value());

  raw.result = -1;
  raw.result_known = 1;
  auto refused = decode_probe_record(bytes_of(raw));
  ASSERT_TRUE(refused);
  EXPECT_EQ(std::get<RuleWriteEvent>(*refused).result, -1);

  // On the devices controller's write path (kernels before 6.14 with trampolines): after
  // the kernel applied the rule, its result known.
  raw.seen_at = GDW_SEEN_AT_WRITE_PATH;
  raw.result = 12;
  raw.result_known = 1;
  auto on_write_path = decode_probe_record(bytes_of(raw));
  ASSERT_TRUE(on_write_path) << on_write_path.error().message;
  EXPECT_FALSE(std::get<RuleWriteEvent>(*on_write_path).seen_at_syscall_exit);
  EXPECT_EQ(std::get<RuleWriteEvent>(*on_write_path).result, 12);

  raw.seen_at = 7;
  auto unknown = decode_probe_record(bytes_of(raw));
  ASSERT_FALSE(unknown);
  EXPECT_NE(unknown.error().message.find("seen_at 7"), std::string::npos) << unknown.error().message;
}

TEST(ProbeRecords, RuleWriteResultAndDeviceProgramLoad) {
  gdw_rule_write_result_event result{};
  result.header.type = GDW_EVENT_RULE_WRITE_RESULT;
  result.pid = 10;
  result.tid = 11;
  result.target_cgroup_id = 555;
  result.result = -22;
  result.write_ktime_ns = 99;
  auto decoded = decode_probe_record(bytes_of(result));
  ASSERT_TRUE(decoded) << decoded.error().message;
  const auto& r = std::get<RuleWriteResultEvent>(*decoded);
  EXPECT_EQ(r.pid, 10);
  EXPECT_EQ(r.tid, 11);
  EXPECT_EQ(r.target_cgroup_id, 555u);
  EXPECT_EQ(r.result, -22);
  EXPECT_EQ(r.write_ktime_ns, 99u);

  gdw_device_program_load_event load{};
  load.header.type = GDW_EVENT_DEVICE_PROGRAM_LOAD;
  load.header.ktime_ns = 5;
  load.caller = sample_process();
  auto loaded = decode_probe_record(bytes_of(load));
  ASSERT_TRUE(loaded) << loaded.error().message;
  const auto& l = std::get<DeviceProgramLoadEvent>(*loaded);
  EXPECT_EQ(l.caller.comm, "runc:[2:INIT]");
  EXPECT_EQ(l.ktime_ns, 5u);

  EXPECT_FALSE(decode_probe_record(bytes_of(load).substr(0, sizeof(load) - 1)));
}

TEST(ProbeRecords, RuleLengthBeyondTheBufferIsClamped) {
  gdw_rule_write_event raw{};
  raw.header.type = GDW_EVENT_RULE_WRITE;
  raw.seen_at = GDW_SEEN_AT_PERMISSION_CHECK;
  raw.rule_len = 1000;
  std::memset(raw.rule, 'x', sizeof(raw.rule));
  auto decoded = decode_probe_record(bytes_of(raw));
  ASSERT_TRUE(decoded);
  EXPECT_EQ(std::get<RuleWriteEvent>(*decoded).rule.size(), sizeof(raw.rule));
}

TEST(ProbeRecords, DeniedOpen) {
  gdw_denied_open_event raw{};
  raw.header.type = GDW_EVENT_DENIED_OPEN;
  raw.opener = sample_process();
  raw.dfd = AT_FDCWD;
  raw.flags = O_RDWR;
  raw.major = 195;
  raw.minor = 7;
  std::strcpy(raw.path, "/dev/nvidia7");
  auto decoded = decode_probe_record(bytes_of(raw));
  ASSERT_TRUE(decoded);
  const auto& event = std::get<DeniedOpenEvent>(*decoded);
  EXPECT_EQ(event.path, "/dev/nvidia7");
  EXPECT_EQ(event.major, 195u);
  EXPECT_EQ(event.minor, 7u);
  EXPECT_EQ(event.flags, O_RDWR);
}

TEST(ProbeRecords, DeviceProgramCommands) {
  const std::pair<std::uint32_t, DeviceProgramEvent::Command> commands[] = {
      {GDW_DEVPROG_PROG_ATTACH, DeviceProgramEvent::Command::kProgAttach},
      {GDW_DEVPROG_PROG_DETACH, DeviceProgramEvent::Command::kProgDetach},
      {GDW_DEVPROG_LINK_CREATE, DeviceProgramEvent::Command::kLinkCreate},
      {GDW_DEVPROG_LINK_DETACH, DeviceProgramEvent::Command::kLinkDetach},
      {GDW_DEVPROG_LINK_UPDATE, DeviceProgramEvent::Command::kLinkUpdate},
  };
  for (const auto& [wire, command] : commands) {
    gdw_device_program_event raw{};
    raw.header.type = GDW_EVENT_DEVICE_PROGRAM;
    raw.command = wire;
    raw.prog_id = 31;
    raw.replaced_prog_id = 30;
    raw.target_cgroup_id = 99;
    raw.result = -2;
    auto decoded = decode_probe_record(bytes_of(raw));
    ASSERT_TRUE(decoded);
    const auto& event = std::get<DeviceProgramEvent>(*decoded);
    EXPECT_EQ(event.command, command);
    EXPECT_EQ(event.prog_id, 31u);
    EXPECT_EQ(event.replaced_prog_id, 30u);
    EXPECT_EQ(event.target_cgroup_id, 99u);
    EXPECT_EQ(event.result, -2);
  }
  gdw_device_program_event unknown{};
  unknown.header.type = GDW_EVENT_DEVICE_PROGRAM;
  unknown.command = 77;
  EXPECT_FALSE(decode_probe_record(bytes_of(unknown)));
}

// The attach hook's records: while the kernel installs the attach (kmalloc, fexit) or ahead
// of it, at the bpf() call's start (lsm/bpf), when a look may come before the attach.
TEST(ProbeRecords, AttachHookRecordsSayWhetherTheAttachIsInstalledYet) {
  const std::tuple<std::uint32_t, bool, bool> kinds[] = {
      {GDW_EVENT_DEVICE_PROGRAM, false, false},
      {GDW_EVENT_DEVICE_PROGRAM_ATTACHING, true, false},
      {GDW_EVENT_DEVICE_PROGRAM_AHEAD, true, true},
  };
  for (const auto& [type, attaching, ahead] : kinds) {
    gdw_device_program_event raw{};
    raw.header.type = type;
    raw.command = GDW_DEVPROG_PROG_ATTACH;
    raw.prog_id = 31;
    raw.target_cgroup_id = 99;
    auto decoded = decode_probe_record(bytes_of(raw));
    ASSERT_TRUE(decoded) << type;
    const auto& event = std::get<DeviceProgramEvent>(*decoded);
    EXPECT_EQ(event.attaching, attaching) << type;
    EXPECT_EQ(event.ahead_of_install, ahead) << type;
    EXPECT_EQ(event.prog_id, 31u);
  }
}

TEST(ProbeRecords, CgroupLifecycle) {
  gdw_cgroup_event raw{};
  raw.header.type = GDW_EVENT_CGROUP_RMDIR;
  raw.hierarchy_id = 5;
  raw.level = 3;
  raw.cgroup_id = 1234;
  std::strcpy(raw.path, "/kubepods/burstable/pod1");
  auto decoded = decode_probe_record(bytes_of(raw));
  ASSERT_TRUE(decoded);
  const auto& event = std::get<CgroupLifecycleEvent>(*decoded);
  EXPECT_FALSE(event.created);
  EXPECT_EQ(event.hierarchy_id, 5u);
  EXPECT_EQ(event.level, 3);
  EXPECT_EQ(event.cgroup_id, 1234u);
  EXPECT_EQ(event.path, "/kubepods/burstable/pod1");
}

TEST(ProbeRecords, ShortAndUnknownRecordsAreErrors) {
  EXPECT_FALSE(decode_probe_record(""));
  gdw_rule_write_event raw{};
  raw.header.type = GDW_EVENT_RULE_WRITE;
  auto truncated = decode_probe_record(bytes_of(raw).substr(0, sizeof(raw) - 1));
  ASSERT_FALSE(truncated);
  EXPECT_NE(truncated.error().message.find("rule write"), std::string::npos);
  gdw_event_header header{};
  header.type = 99;
  auto unknown = decode_probe_record(bytes_of(header));
  ASSERT_FALSE(unknown);
  EXPECT_NE(unknown.error().message.find("99"), std::string::npos);
}

}  // namespace
}  // namespace gdw
