#include "probe/probe_records.h"

#include <cstring>
#include <string>

#include "devwatch_events.h"

namespace gdw {
namespace {

// Fixed-size kernel char arrays: NUL-terminated when shorter than the array.
std::string bounded_string(const char* chars, std::size_t capacity) {
  return std::string(chars, ::strnlen(chars, capacity));
}

ProcessInfo to_process_info(const gdw_process& p) {
  ProcessInfo info;
  info.pid = static_cast<pid_t>(p.pid);
  info.tid = static_cast<pid_t>(p.tid);
  info.comm = bounded_string(p.comm, sizeof(p.comm));
  info.parent_pid = static_cast<pid_t>(p.parent_pid);
  info.parent_comm = bounded_string(p.parent_comm, sizeof(p.parent_comm));
  info.cgroup_id = p.cgroup_id;
  info.devices_cgroup_id = p.devices_cgroup_id;
  info.start_time_ns = p.start_time_ns;
  info.cpu = static_cast<int>(p.cpu);
  return info;
}

// Copies the record into a properly aligned struct after checking its size.
template <class Record>
Result<Record> read_record(std::string_view record, const char* what) {
  if (record.size() < sizeof(Record)) {
    return Error{std::string("probe record '") + what + "' is " + std::to_string(record.size()) +
                 " bytes, expected " + std::to_string(sizeof(Record)) +
                 " (BPF object and daemon built from different devwatch_events.h?)"};
  }
  Record out;
  std::memcpy(&out, record.data(), sizeof(Record));
  return out;
}

Result<ProbeEvent> decode_rule_write(std::string_view record) {
  auto raw = read_record<gdw_rule_write_event>(record, "rule write");
  if (!raw) return raw.error();
  RuleWriteEvent event;
  event.writer = to_process_info(raw->writer);
  event.target_cgroup_id = raw->target_cgroup_id;
  event.deny = raw->deny != 0;
  std::size_t len = raw->rule_len < sizeof(raw->rule) ? raw->rule_len : sizeof(raw->rule);
  event.rule.assign(raw->rule, len);
  while (!event.rule.empty() && (event.rule.back() == '\n' || event.rule.back() == '\0')) event.rule.pop_back();
  switch (raw->seen_at) {
    case GDW_SEEN_AT_PERMISSION_CHECK: event.seen_at_syscall_exit = false; break;
    case GDW_SEEN_AT_SYSCALL_EXIT: event.seen_at_syscall_exit = true; break;
    case GDW_SEEN_AT_WRITE_PATH: event.seen_at_syscall_exit = false; break;
    default: return Error{"probe record 'rule write' has unknown seen_at " + std::to_string(raw->seen_at)};
  }
  if (raw->result_known) event.result = raw->result;
  event.ktime_ns = raw->header.ktime_ns;
  return ProbeEvent{std::move(event)};
}

Result<ProbeEvent> decode_rule_write_result(std::string_view record) {
  auto raw = read_record<gdw_rule_write_result_event>(record, "rule write result");
  if (!raw) return raw.error();
  RuleWriteResultEvent event;
  event.pid = static_cast<pid_t>(raw->pid);
  event.tid = static_cast<pid_t>(raw->tid);
  event.target_cgroup_id = raw->target_cgroup_id;
  event.result = raw->result;
  event.write_ktime_ns = raw->write_ktime_ns;
  return ProbeEvent{event};
}

Result<ProbeEvent> decode_device_program_load(std::string_view record) {
  auto raw = read_record<gdw_device_program_load_event>(record, "device program load");
  if (!raw) return raw.error();
  DeviceProgramLoadEvent event;
  event.caller = to_process_info(raw->caller);
  event.ktime_ns = raw->header.ktime_ns;
  return ProbeEvent{std::move(event)};
}

Result<ProbeEvent> decode_denied_open(std::string_view record) {
  auto raw = read_record<gdw_denied_open_event>(record, "denied open");
  if (!raw) return raw.error();
  DeniedOpenEvent event;
  event.opener = to_process_info(raw->opener);
  event.path = bounded_string(raw->path, sizeof(raw->path));
  event.dfd = raw->dfd;
  event.flags = static_cast<int>(raw->flags);
  event.major = raw->major;
  event.minor = raw->minor;
  event.ktime_ns = raw->header.ktime_ns;
  return ProbeEvent{std::move(event)};
}

Result<ProbeEvent> decode_device_program(std::string_view record, bool attaching, bool ahead = false) {
  auto raw = read_record<gdw_device_program_event>(record, "device program");
  if (!raw) return raw.error();
  DeviceProgramEvent event;
  switch (raw->command) {
    case GDW_DEVPROG_PROG_ATTACH: event.command = DeviceProgramEvent::Command::kProgAttach; break;
    case GDW_DEVPROG_PROG_DETACH: event.command = DeviceProgramEvent::Command::kProgDetach; break;
    case GDW_DEVPROG_LINK_CREATE: event.command = DeviceProgramEvent::Command::kLinkCreate; break;
    case GDW_DEVPROG_LINK_DETACH: event.command = DeviceProgramEvent::Command::kLinkDetach; break;
    case GDW_DEVPROG_LINK_UPDATE: event.command = DeviceProgramEvent::Command::kLinkUpdate; break;
    default:
      return Error{"probe record 'device program' has unknown command " + std::to_string(raw->command)};
  }
  event.caller = to_process_info(raw->caller);
  event.target_cgroup_id = raw->target_cgroup_id;
  event.prog_id = raw->prog_id;
  event.replaced_prog_id = raw->replaced_prog_id;
  event.flags = raw->flags;
  event.result = raw->result;
  event.attaching = attaching;
  event.ahead_of_install = ahead;
  event.ktime_ns = raw->header.ktime_ns;
  return ProbeEvent{std::move(event)};
}

Result<ProbeEvent> decode_cgroup(std::string_view record, bool created) {
  auto raw = read_record<gdw_cgroup_event>(record, created ? "cgroup mkdir" : "cgroup rmdir");
  if (!raw) return raw.error();
  CgroupLifecycleEvent event;
  event.created = created;
  event.caller = to_process_info(raw->caller);
  event.hierarchy_id = raw->hierarchy_id;
  event.cgroup_id = raw->cgroup_id;
  event.level = raw->level;
  event.path = bounded_string(raw->path, sizeof(raw->path));
  return ProbeEvent{std::move(event)};
}

Result<ProbeEvent> decode_writer_exit(std::string_view record) {
  auto raw = read_record<gdw_writer_exit_event>(record, "writer exit");
  if (!raw) return raw.error();
  return ProbeEvent{WriterExitEvent{static_cast<pid_t>(raw->pid), raw->header.ktime_ns}};
}

}  // namespace

Result<ProbeEvent> decode_probe_record(std::string_view record) {
  gdw_event_header header;
  if (record.size() < sizeof(header)) {
    return Error{"probe record of " + std::to_string(record.size()) + " bytes is shorter than its header"};
  }
  std::memcpy(&header, record.data(), sizeof(header));
  switch (header.type) {
    case GDW_EVENT_RULE_WRITE: return decode_rule_write(record);
    case GDW_EVENT_DENIED_OPEN: return decode_denied_open(record);
    case GDW_EVENT_DEVICE_PROGRAM: return decode_device_program(record, false);
    case GDW_EVENT_DEVICE_PROGRAM_ATTACHING: return decode_device_program(record, true);
    case GDW_EVENT_DEVICE_PROGRAM_AHEAD: return decode_device_program(record, true, true);
    case GDW_EVENT_CGROUP_MKDIR: return decode_cgroup(record, true);
    case GDW_EVENT_CGROUP_RMDIR: return decode_cgroup(record, false);
    case GDW_EVENT_RULE_WRITE_RESULT: return decode_rule_write_result(record);
    case GDW_EVENT_DEVICE_PROGRAM_LOAD: return decode_device_program_load(record);
    case GDW_EVENT_WRITER_EXIT: return decode_writer_exit(record);
    default: return Error{"probe record has unknown type " + std::to_string(header.type)};
  }
}

}  // namespace gdw
