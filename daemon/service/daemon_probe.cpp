// The daemon's use of the eBPF probe: who revoked (rule writes, v2 program changes), denied
// opens inside GPU containers, and cgroup_mkdir as a faster trigger than inotify.
#include <sys/epoll.h>
#include <unistd.h>

#include <algorithm>
#include <type_traits>
#include <variant>

#include "core/writer_name.h"
#include "log/log.h"
#include "service/daemon.h"
#include "service/daemon_internal.h"

namespace gdw {
namespace {

using namespace daemon_internal;

// Denied opens of one device in one container are logged at most this often.
constexpr Clock::duration kDeniedOpenLogInterval = std::chrono::minutes(1);

// The process behind an event; its executable is read now, while it may still exist.
WriterIdentity identify(const ProcessInfo& p) {
  char exe[4096];
  ssize_t len = ::readlink(("/proc/" + std::to_string(p.pid) + "/exe").c_str(), exe, sizeof exe - 1);
  return WriterIdentity{p.comm, p.parent_comm, len > 0 ? std::string(exe, static_cast<std::size_t>(len)) : "", p.pid};
}

}  // namespace

void Daemon::load_probe() {
  auto probe = Probe::load();
  if (!probe) {
    probe_status_ = "off: " + probe.error().message;
    log::warn("eBPF probe not loaded, continuing on inotify alone: " + probe.error().message);
    return;
  }
  // Higher priority than inotify: the record of a revoking write is read before the repair
  // it triggers, so the repair's log line can name the writer.
  auto src = loop_->add_io((*probe)->fd(), EPOLLIN, [this](std::uint32_t) { on_probe(); }, "probe", -20);
  if (!src) {
    probe_status_ = "off: " + src.error().message;
    log::warn("eBPF probe not loaded: " + src.error().message);
    return;
  }
  probe_ = std::move(*probe);
  probe_source_ = std::move(*src);
  probe_majors_.clear();
  probe_paths_.clear();
  probe_status_ = "loaded";
  log::info("eBPF probe loaded: attributing rule writes, reporting denied opens");
}

void Daemon::watch_in_probe(Watched& w) {
  if (!probe_) return;
  if (w.cgroup_id) {
    if (auto s = probe_->watch_cgroup(w.cgroup_id); !s) log::warn("probe: " + s.error().message);
  }
  for (const auto& d : w.target.desired.wanted) {
    if (probe_majors_.insert(d.dev.major).second) (void)probe_->watch_major(d.dev.major);
    // The node's path inside containers (/dev/<name>) and on this host (dev_root).
    for (const std::string& path : {"/dev/" + d.name, config_.devices.dev_root + "/" + d.name}) {
      if (probe_paths_.insert(path).second) (void)probe_->watch_device_node(path, d.dev.major, d.dev.minor);
    }
  }
}

Daemon::Watched* Daemon::container_by_cgroup_id(std::uint64_t id) {
  auto dir = dir_by_cgroup_id_.find(id);
  if (dir == dir_by_cgroup_id_.end()) return nullptr;
  auto it = containers_.find(dir->second);
  return it == containers_.end() ? nullptr : &it->second;
}

void Daemon::on_probe() {
  auto n = probe_->consume([this](const ProbeEvent& ev) {
    std::visit(
        [this](const auto& e) {
          using T = std::decay_t<decltype(e)>;
          if constexpr (std::is_same_v<T, RuleWriteEvent>) {
            on_rule_write(e);
          } else if constexpr (std::is_same_v<T, DeniedOpenEvent>) {
            on_denied_open(e);
          } else if constexpr (std::is_same_v<T, CgroupLifecycleEvent>) {
            on_cgroup_lifecycle(e);
          } else if constexpr (std::is_same_v<T, DeviceProgramEvent>) {
            on_device_program(e);
          }
        },
        ev);
  });
  if (!n) {
    metrics_.event_loop_error("probe");
    log::error("reading probe events: " + n.error().message);
  }
  metrics_.set_ring_buffer_drops(probe_->stats().ring_buffer_drops);
}

void Daemon::on_rule_write(const RuleWriteEvent& ev) {
  Watched* w = container_by_cgroup_id(ev.target_cgroup_id);
  if (!w || w->target.kind != TargetKind::kGpu || !ev.deny || ev.result < 0) return;
  if (ev.writer.pid == ::getpid()) return;
  auto rule = parse_device_rule(ev.rule);
  if (!rule) return;
  // It revokes when it matches a wanted device and takes away some of the access it needs.
  const bool revoking = std::any_of(w->target.desired.wanted.begin(), w->target.desired.wanted.end(),
                                    [&](const WantedDevice& d) {
                                      if (rule->type == DeviceType::kAll) return true;
                                      const DeviceRule numbers{rule->type, rule->major, rule->minor, kAccessAll};
                                      return rule_covers(numbers, d.dev, kAccessAll) && (rule->access & d.access) != 0;
                                    });
  if (!revoking) return;
  const WriterIdentity who = identify(ev.writer);
  Watched::Revocation r;
  r.writer = recognise_writer(who);
  r.detail = r.writer + " (pid " + std::to_string(ev.writer.pid) + ", comm " + ev.writer.comm +
             (who.exe.empty() ? "" : ", " + who.exe) + ", parent " + ev.writer.parent_comm + ") writing '" + ev.rule +
             "' to devices.deny";
  r.at = Clock::time_point(std::chrono::duration_cast<Clock::duration>(std::chrono::nanoseconds(ev.ktime_ns)));
  w->last_revocation = std::move(r);
  metrics_.revocation(w->last_revocation->writer);
  if (!w->unlogged_grants.empty()) log_grants(*w);
}

void Daemon::on_denied_open(const DeniedOpenEvent& ev) {
  Watched* w = container_by_cgroup_id(ev.opener.devices_cgroup_id);
  if (!w) w = container_by_cgroup_id(ev.opener.cgroup_id);
  if (!w || w->target.kind != TargetKind::kGpu) return;
  std::string device = "other";
  for (const auto& d : w->target.desired.wanted)
    if (d.dev.major == ev.major && d.dev.minor == ev.minor) device = d.name;
  metrics_.denied_open(w->labels, device);
  const auto now = Clock::now();
  auto& last = w->denied_open_logged[device];
  if (last != Clock::time_point{} && now - last < kDeniedOpenLogInterval) return;
  last = now;
  log::Fields f = fields_of(w->labels, w->cgroup.cgroup_dir);
  f.device = device;
  log::warn("open(" + ev.path + ") of c " + std::to_string(ev.major) + ":" + std::to_string(ev.minor) +
                " denied (EPERM) for pid " + std::to_string(ev.opener.pid) + " (" + ev.opener.comm + ")",
            f);
}

void Daemon::on_device_program(const DeviceProgramEvent& ev) {
  if (!v2() || ev.caller.pid == ::getpid() || ev.result < 0) return;
  Watched* w = container_by_cgroup_id(ev.target_cgroup_id);
  if (!w || w->target.kind != TargetKind::kGpu) return;
  using Command = DeviceProgramEvent::Command;
  const char* what = ev.command == Command::kProgAttach   ? "attaching"
                     : ev.command == Command::kProgDetach ? "detaching"
                     : ev.command == Command::kLinkCreate ? "linking"
                     : ev.command == Command::kLinkUpdate ? "updating the link of"
                                                          : "detaching the link of";
  // Only a change that leaves wanted devices denied is a revocation worth naming.
  const DeviceCheck now = check_devices(*w);
  if (now.ok() && !now.missing.empty()) {
    const WriterIdentity who = identify(ev.caller);
    Watched::Revocation r;
    r.writer = recognise_writer(who);
    r.detail = r.writer + " (pid " + std::to_string(ev.caller.pid) + ", comm " + ev.caller.comm +
               (who.exe.empty() ? "" : ", " + who.exe) + ") " + what + " device program " + std::to_string(ev.prog_id);
    r.at = Clock::now();
    w->last_revocation = std::move(r);
    metrics_.revocation(w->last_revocation->writer);
  }
  check_and_repair(*w, Clock::now());
  update_gauges();
}

void Daemon::on_cgroup_lifecycle(const CgroupLifecycleEvent& ev) {
  // A faster trigger than inotify for new containers; inotify stays the fallback and
  // dir_created() is idempotent.
  if (!ev.created || !located_ || tree_hierarchy_id_ != ev.hierarchy_id) return;
  dir_created(node_->kubepods().hierarchy_root + ev.path);
}

}  // namespace gdw
